import enum
import math

ELEMENT_SIZE = {"half": 2, "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "uint8": 1}


class MemoryFormat(enum.Enum):
    UNDEFINED = 0
    KV_2LTD = 1
    KV_T2D = 2
    BINARY = 3
    BINARY_BUFFER = 4
    KV_MLA_FMT = 5


class MemoryObj:
    """Host memory with a shape, dtype and format; byte_array exposes it (writable)."""

    def __init__(self, shape, dtype, fmt):
        self.shape, self.dtype, self.fmt = tuple(shape), dtype, fmt
        self.buffer = bytearray(math.prod(self.shape) * ELEMENT_SIZE[dtype])
        self.ref_count = 1

    @property
    def byte_array(self):
        return memoryview(self.buffer)

    def get_shape(self):
        return self.shape

    def get_dtype(self):
        return self.dtype

    def get_memory_format(self):
        return self.fmt

    def ref_count_down(self):
        self.ref_count -= 1


class LocalCPUBackend:
    """allocate() as LMCache's LocalCPUBackend: a MemoryObj, or None when out of memory."""

    def __init__(self, capacity_bytes=1 << 30):
        self.capacity, self.used, self.config, self.metadata = capacity_bytes, 0, None, None

    def allocate(self, shape, dtype, fmt):
        obj = MemoryObj(shape, dtype, fmt)
        if self.used + len(obj.buffer) > self.capacity:
            return None
        self.used += len(obj.buffer)
        return obj
