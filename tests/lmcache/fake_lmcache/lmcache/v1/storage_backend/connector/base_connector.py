import abc


class RemoteConnector(metaclass=abc.ABCMeta):
    """The abstract methods of LMCache's RemoteConnector; a plugin must implement all of them."""

    @abc.abstractmethod
    async def exists(self, key): ...

    @abc.abstractmethod
    def exists_sync(self, key): ...

    @abc.abstractmethod
    async def get(self, key): ...

    @abc.abstractmethod
    async def put(self, key, memory_obj): ...

    @abc.abstractmethod
    async def list(self): ...

    @abc.abstractmethod
    async def close(self): ...

    def support_ping(self):
        return False

    def support_batched_contains(self):
        return False
