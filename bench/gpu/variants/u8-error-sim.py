#!/usr/bin/env python3
"""The error of u8-operands.patch's decode math against exact attention, beside the fp16 path's.

A float64 simulation (numpy), not the kernel: synthetic KV (8 query heads on one KV head, head_dim
128, T tokens, standard normal K and V; with --outliers K's first 4 channels times 8), hack-int2 per
64-token block and channel (min, scale = (max - min) / 3 in fp16, nearest codes). The fp16 path
computes attention over the dequantized KV; u8-operands rounds, per block, Q' = q^ * scale * 2^n
to s8 (q^ = q * softmax_scale * log2 e * 2^(7 - a) * 127/128 in fp16, 2^n bringing the block's
largest K scale to [1, 2)) and P to u8 as 255 p against the running maximum. --ranges instead
scales each head's Q' by its own block maximum and P by the block's own maximum (what a fix would
cost the kernel: about 70 instructions per block). Prints, per T and seed, both errors against
exact attention (relative L2 over the 8 heads) and their ratio (issue 24 §2 allows 1.05x).

  /usr/bin/python3 bench/gpu/variants/u8-error-sim.py [--outliers] [--ranges]
"""
import sys

import numpy as np

from hack_sim import f16, references

OUTLIERS = '--outliers' in sys.argv
RANGES = '--ranges' in sys.argv


def run(tokens, seed, dim=128, heads=8):
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((tokens, dim))
    v = rng.standard_normal((tokens, dim))
    if OUTLIERS:
        k[:, :4] *= 8.0
    q = rng.standard_normal((heads, dim))
    sl, exact, fp16_path, (kc, ks, km), (vc, vs, vm) = references(q, k, v)

    qs = q * sl
    a = np.floor(np.log2(np.abs(qs).max(1))) + 2  # max |qs| 2^-a in [1/4, 1/2)
    qh = f16(qs * (2.0 ** (7 - a))[:, None] * 127 / 128)
    m = np.full(heads, -np.inf)
    l = np.zeros(heads)
    o = np.zeros((heads, dim))
    for b in range(tokens // 64):
        up = 2.0 ** -np.floor(np.log2(ks[b].max()))  # the block's largest scale to [1, 2)
        x = f16(qh * f16(ks[b] * up)[None, :])
        e = 6 - np.floor(np.log2(np.abs(x).max(1))) if RANGES else np.zeros(heads)
        qp = np.clip(np.rint(f16(x * (2.0 ** e)[:, None])), -128, 127)
        acc = qp @ kc[b].T / (2.0 ** e)[:, None]
        s = (acc / (2.0 ** (7 - a) * up * 127 / 128)[:, None]
             + (f16(qs * 2.0 ** -a[:, None]) @ km[b] * 2.0 ** a)[:, None])
        mx = np.maximum(m, s.max(1))
        corr = np.exp2(m - mx)
        m = mx
        ref = s.max(1) if RANGES else m
        f = np.exp2(ref - m)
        pu = np.rint(f16(f16(np.exp2(s - ref[:, None])) * 255))
        l = l * corr + f * pu.sum(1) / 255
        o = o * corr[:, None] + f[:, None] * ((pu @ vc[b]) * vs[b] + pu.sum(1)[:, None] * vm[b]) / 255
    u8 = o / l[:, None]
    err = lambda x: np.linalg.norm(x - exact) / np.linalg.norm(exact)
    return err(fp16_path), err(u8)


for tokens in (1024, 4096, 32768):
    for seed in (0, 1):
        fp16_err, u8_err = run(tokens, seed)
        print(f'T {tokens:6d} seed {seed}: fp16 path {fp16_err:.4f}, u8-operands {u8_err:.4f} '
              f'({u8_err / fp16_err:.3f}x)')
