# The integer codes of lmcache/v1/protocol.py (torch dtypes replaced by their names).
DTYPE_TO_INT = {None: 0, "half": 1, "float16": 2, "bfloat16": 3, "float32": 4, "float64": 5,
                "uint8": 6, "float8_e4m3fn": 7, "float8_e5m2": 8}
INT_TO_DTYPE = {v: k for k, v in DTYPE_TO_INT.items()}
