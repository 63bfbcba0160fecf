"""What the decode-math simulations in this folder share (u8-error-sim.py, fp8-error-sim.py).

float64 numpy: fp16 rounding, hack-int2 per 64-token block and channel (min, scale = (max - min) /
3 in fp16, nearest codes, as the container's quantizer), its dequantization, exact attention in
base 2 (scores times sl, which carries softmax_scale * log2 e), and the two references a
simulated kernel is compared with.
"""
import numpy as np


def f16(x):
    return np.asarray(x, dtype=np.float64).astype(np.float16).astype(np.float64)


def quantize(x):  # [T, D] -> codes [B, 64, D], scale [B, D], min [B, D]
    blocks = x.reshape(x.shape[0] // 64, 64, x.shape[1])
    mn = f16(blocks.min(1))
    sc = f16((blocks.max(1) - mn) / 3)
    sc[sc == 0] = 1e-8
    return np.clip(np.rint((blocks - mn[:, None]) / sc[:, None]), 0, 3), sc, mn


def dequantize(codes, sc, mn):  # back to [T, D]
    return (mn[:, None] + codes * sc[:, None]).reshape(-1, codes.shape[2])


def attention(q, k, v, sl):
    s = (q @ k.T) * sl
    p = np.exp2(s - s.max(1, keepdims=True))
    return (p @ v) / p.sum(1, keepdims=True)


def references(q, k, v):
    """sl, exact attention, the fp16 path's (attention over the dequantized KV), and K's and V's
    (codes, scale, min)."""
    sl = np.log2(np.e) / np.sqrt(q.shape[1])
    kq, vq = quantize(k), quantize(v)
    return sl, attention(q, k, v, sl), attention(q, dequantize(*kq), dequantize(*vq), sl), kq, vq
