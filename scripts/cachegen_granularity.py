#!/usr/bin/env python3
"""Scaling-granularity study behind CacheGen's quantizer (docs/cachegen.md): for each choice of
K and V scaling (LMCache per-token absmax, per-channel min/max, per-token min/max) and bins, the
ideal coded size (empirical entropy with one table per (layer, K|V)), relative L2 error and
attention-output error, on the real KV and on a synthetic file.
Usage: /usr/bin/python3 scripts/cachegen_granularity.py [SYNTH.npy]   (needs numpy)"""
import sys

import numpy as np
kv = np.load(__import__('pathlib').Path(__file__).resolve().parents[2] / 'shared/data/tinystories656k-kv-768tok.npy').astype(np.float64)
L = kv.shape[0]
def chunks(x):
    return [x[:, :, i:i+256] for i in range(0, x.shape[2], 256)]

def quant_token_absmax(x, bins):  # x: [T, C]; LMCache
    MAX = bins//2 - 1
    m = np.abs(x).max(axis=1, keepdims=True); m[m == 0] = 1
    q = np.clip(np.rint(x * (MAX / m) + MAX), 0, 2*MAX)
    return q, (q - MAX) / MAX * m, 2  # fp16 scale per token -> bytes per token
def quant_chan_minmax(x, bins):  # per channel over tokens
    lo = x.min(axis=0, keepdims=True); hi = x.max(axis=0, keepdims=True)
    step = (hi - lo) / (bins - 1); step[step == 0] = 1
    q = np.clip(np.rint((x - lo) / step), 0, bins-1)
    return q, lo + q * step, 4
def quant_token_minmax(x, bins):
    lo = x.min(axis=1, keepdims=True); hi = x.max(axis=1, keepdims=True)
    step = (hi - lo) / (bins - 1); step[step == 0] = 1
    q = np.clip(np.rint((x - lo) / step), 0, bins-1)
    return q, lo + q * step, 4

def entropy_bits(q, axis_groups):
    # shared table over all symbols in q (one (layer, kv)): empirical entropy
    vals, counts = np.unique(q, return_counts=True)
    p = counts / counts.sum()
    return -(counts * np.log2(p)).sum()

def delta_entropy(q):  # entropy of token deltas (anchor at token 0)
    d = np.diff(q, axis=0)
    return entropy_bits(d, None) + 0

def attn(qv, K, V):
    s = qv @ K.T / np.sqrt(K.shape[1])
    s = s - s.max(axis=1, keepdims=True); p = np.exp(s); p /= p.sum(axis=1, keepdims=True)
    return p @ V

def evaluate(kmode, vmode, kbins, vbins, chunks_list, H, D):
    bits = 0; scale_bytes = 0; num = 0; den = 0; anum = 0; aden = 0; n = 0
    rng = np.random.default_rng(0)
    for c in chunks_list:
        T = c.shape[2]
        for l in range(L):
            recon = {}
            for kvi, mode, bins in ((0, kmode, kbins), (1, vmode, vbins)):
                x = c[l, kvi].reshape(T, H * D)
                q, xr, sb = mode(x, bins)
                bits += entropy_bits(q, None)
                scale_bytes += sb * (T if mode in (quant_token_absmax, quant_token_minmax) else H * D) / (2 if mode is quant_token_absmax else 1)
                num += ((x - xr) ** 2).sum(); den += (x ** 2).sum()
                recon[kvi] = xr.reshape(T, H, D)
                n += x.size
            for h in range(H):
                K = c[l, 0, :, h]; V = c[l, 1, :, h]
                qs = K[rng.integers(0, T, 64)] + rng.standard_normal((64, D)) * K.std()
                o = attn(qs, K, V); orr = attn(qs, recon[0][:, h], recon[1][:, h])
                anum += ((o - orr) ** 2).sum(); aden += (o ** 2).sum()
    fp16 = n * 2
    return bits / 8, scale_bytes, np.sqrt(num / den), np.sqrt(anum / aden), fp16

def run(name, data):
    H, D = data.shape[3], data.shape[4]
    cl = chunks(data)
    print(f"== {name} shape {data.shape}")
    print(f"{'K mode':16s}{'V mode':16s}{'bins':>6s}{'payload B':>11s}{'scales B':>10s}{'bits/sym':>9s}{'relL2':>9s}{'attnErr':>9s}")
    for kb, vb in ((32, 32), (16, 16), (8, 8)):
        for km, vm in ((quant_token_absmax, quant_token_absmax), (quant_chan_minmax, quant_token_absmax), (quant_chan_minmax, quant_chan_minmax), (quant_chan_minmax, quant_token_minmax)):
            pb, sb, e, ae, fp16 = evaluate(km, vm, kb, vb, cl, H, D)
            print(f"{km.__name__[6:]:16s}{vm.__name__[6:]:16s}{kb:>6d}{pb:>11.0f}{sb:>10.0f}{pb*8/(fp16/2):>9.3f}{e:>9.4f}{ae:>9.4f}")
run("real TinyStories KV", kv)
syn = np.load(sys.argv[1]).astype(np.float64) if len(sys.argv) > 1 else None
if syn is not None: run("synthetic", syn)
