"""A minimal stand-in for the parts of LMCache that a remote-storage plugin touches, written from
LMCache's sources (docs/lmcache.md pins the version): the plugin loader of ConnectorManager, the
RemoteConnector interface, MemoryObj and the dtype tables. LMCache itself (torch, CUDA) is not
installable in CI."""
