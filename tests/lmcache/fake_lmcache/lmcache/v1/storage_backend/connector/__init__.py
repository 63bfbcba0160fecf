"""The plugin discovery of LMCache's ConnectorManager: for each name in
config.remote_storage_plugins, import extra_config["remote_storage_plugin.<name>.module_path"],
take "...class_name"; a ConnectorAdapter subclass is instantiated without arguments; the first
adapter whose can_parse(url) accepts the remote URL creates the connector."""
import importlib
import inspect
from abc import ABC, abstractmethod

from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector


class ConnectorContext:
    def __init__(self, url, loop, local_cpu_backend, config, metadata=None, plugin_name=None):
        self.url, self.loop, self.local_cpu_backend = url, loop, local_cpu_backend
        self.config, self.metadata, self.plugin_name = config, metadata, plugin_name


class ConnectorAdapter(ABC):
    def __init__(self, schema: str = "") -> None:
        self.schema = schema

    def can_parse(self, url: str) -> bool:
        return self.schema != "" and url.startswith(self.schema)

    @abstractmethod
    def create_connector(self, context: ConnectorContext) -> RemoteConnector: ...


class Config:
    def __init__(self, remote_storage_plugins, extra_config):
        self.remote_storage_plugins, self.extra_config = remote_storage_plugins, extra_config


def CreateConnector(url, loop, local_cpu_backend, config, metadata=None, plugin_name=None):
    if "://" not in url:
        raise ValueError(f"Invalid remote url {url}: missing scheme")
    adapters = []
    for name in config.remote_storage_plugins or []:
        module = importlib.import_module(
            config.extra_config[f"remote_storage_plugin.{name}.module_path"])
        cls = getattr(module, config.extra_config[f"remote_storage_plugin.{name}.class_name"])
        assert inspect.isclass(cls) and issubclass(cls, ConnectorAdapter), cls
        adapters.append(cls())
    for adapter in adapters:
        if adapter.can_parse(url):
            connector = adapter.create_connector(
                ConnectorContext(url, loop, local_cpu_backend, config, metadata, plugin_name))
            assert isinstance(connector, RemoteConnector)
            return connector
    raise ValueError(f"No adapter found for URL: {url}")
