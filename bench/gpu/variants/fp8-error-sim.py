#!/usr/bin/env python3
"""A decode block loop on e4m3 operands: its error against exact attention, beside the fp16 path's.

A float64 simulation (numpy), not a kernel: what a decode kernel on wgmma.m64n8k32.e4m3 would
compute (bench/gpu/probes/mma_forms.cu times that form). hack-int2 per 64-token block and channel
(min, scale = (max - min) / 3 in fp16, nearest codes), as u8-error-sim.py. The codes are exact in
e4m3 (subnormals c * 2^-9, or c * 2^-7 with the factor 4 folded into the other operand); per block
Q'' = q * softmax_scale * log2 e * K scale is rounded to e4m3 after a power of two per head brings
its largest magnitude to [128, 256) (e4m3's largest finite value is 448), and P = 2^(s - m) to
e4m3 as 256 p; the mins' bias (q . K min) and the output's V scales, V mins and normaliser stay
fp32 (fp16 operands where the fp16 path has them). --q-only / --p-only round one of the two.

Data: synthetic (8 query heads on one KV head, head_dim 128, standard normal K and V; --outliers:
K's first 4 channels times 8; queries standard normal, or --peaked T: each head's query the sum of
3 random keys, scaled to norm T * sqrt(128) / log2 e, so that attention concentrates), or --real
PATH (../shared/data's [layers, K/V, tokens, heads, head_dim] fp16 array: per layer and head, the
queries are the keys of 8 random tokens, over the first 768 - 768 % 64 tokens). Prints each
case's relative L2 error against exact attention for the fp16 path and the e4m3 form, and their
ratio (issue 24 §2 allows 1.05x).

  /usr/bin/python3 bench/gpu/variants/fp8-error-sim.py [--outliers] [--peaked T] [--real PATH]
      [--q-only | --p-only]
"""
import sys

import numpy as np

from hack_sim import f16, references

ARGS = sys.argv[1:]
ROUND_Q = '--p-only' not in ARGS
ROUND_P = '--q-only' not in ARGS


def arg(name, default=None):
    return ARGS[ARGS.index(name) + 1] if name in ARGS else default


def e4m3(x):
    """Round to nearest e4m3 (4 exponent bits, bias 7, 3 mantissa bits; subnormals below 2^-6)."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    e = np.maximum(np.floor(np.log2(np.where(a > 0, a, 1.0))), -6)
    step = 2.0 ** (e - 3)
    return np.sign(x) * np.minimum(np.rint(a / step) * step, 448.0)


def errors(q, k, v):
    """(fp16 path, e4m3 form) relative L2 errors against exact attention."""
    heads, dim = q.shape
    sl, exact, fp16_path, (kc, ks, km), (vc, vs, vm) = references(q, k, v)
    qs = q * sl
    m = np.full(heads, -np.inf)
    l = np.zeros(heads)
    o = np.zeros((heads, dim))
    for b in range(kc.shape[0]):
        x = qs * ks[b][None, :]
        up = 2.0 ** (7 - np.floor(np.log2(np.abs(x).max(1))))  # largest |Q''| to [128, 256)
        xq = (e4m3(x * up[:, None]) if ROUND_Q else f16(x * up[:, None])) / up[:, None]
        s = xq @ kc[b].T + (f16(qs) @ km[b])[:, None]
        mx = np.maximum(m, s.max(1))
        corr = np.exp2(m - mx)
        m = mx
        p = np.exp2(s - m[:, None])
        pq = e4m3(p * 256) / 256 if ROUND_P else f16(p)
        l = l * corr + pq.sum(1)
        o = o * corr[:, None] + (pq @ vc[b]) * vs[b] + pq.sum(1)[:, None] * vm[b]
    err = lambda x: np.linalg.norm(x - exact) / np.linalg.norm(exact)
    return err(fp16_path), err(o / l[:, None])


def report(label, pair):
    fp16_err, e4m3_err = pair
    print(f'{label}: fp16 path {fp16_err:.4f}, e4m3 form {e4m3_err:.4f} '
          f'({e4m3_err / fp16_err:.3f}x)')


if arg('--real'):
    kv = np.load(arg('--real')).astype(np.float64)  # [layers, K/V, tokens, heads, head_dim]
    tokens = kv.shape[2] - kv.shape[2] % 64
    rng = np.random.default_rng(0)
    for layer in range(kv.shape[0]):
        for head in range(kv.shape[3]):
            k = kv[layer, 0, :tokens, head]
            v = kv[layer, 1, :tokens, head]
            q = k[rng.integers(0, tokens, 8)]
            report(f'layer {layer} head {head}', errors(q, k, v))
else:
    peaked = float(arg('--peaked', '0'))
    for tokens in (1024, 4096, 32768):
        for seed in (0, 1):
            rng = np.random.default_rng(seed)
            k = rng.standard_normal((tokens, 128))
            v = rng.standard_normal((tokens, 128))
            if '--outliers' in ARGS:
                k[:, :4] *= 8.0
            if peaked:
                q = k[rng.integers(0, tokens, (8, 3))].sum(1)
                q *= peaked * np.sqrt(128) / np.log2(np.e) / np.linalg.norm(q, axis=1)[:, None]
            else:
                q = rng.standard_normal((8, 128))
            report(f'T {tokens:6d} seed {seed}', errors(q, k, v))
