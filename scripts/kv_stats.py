#!/usr/bin/python3
"""Summary statistics of a KV tensor [layers, 2, tokens, kv_heads, head_dim] (docs/synth.md).

Usage: /usr/bin/python3 scripts/kv_stats.py A.npy [B.npy | B.bin:L,T,H,D ...]
Prints a Markdown table, one row per statistic and one column per file. FILE:L,T,H,D reads raw
little-endian fp16 of shape [L, 2, T, H, D]. Needs numpy.
"""
import sys
import numpy as np


def load(arg):
    if ':' in arg:
        path, dims = arg.rsplit(':', 1)
        L, T, H, D = (int(x) for x in dims.split(','))
        return np.fromfile(path, dtype='<f2').reshape(L, 2, T, H, D).astype(np.float64)
    return np.load(arg).astype(np.float64)


def unrope(k, theta=10000.0):
    """Inverse of Llama RoPE (pairs (i, i + D/2), position = token index) on [L, T, H, D]."""
    T, D = k.shape[1], k.shape[3]
    half = D // 2
    out = k.copy()
    t = np.arange(T)[:, None]
    for i in range(half):
        w = theta ** (-2.0 * i / (2 * half))
        c, s = np.cos(w * t), np.sin(w * t)
        x, y = k[..., i], k[..., i + half]
        out[..., i] = x * c + y * s
        out[..., i + half] = -x * s + y * c
    return out


def lag1(x):  # mean over channels of the lag-1 autocorrelation along tokens (axis 1)
    xc = x - x.mean(1, keepdims=True)
    return float(((xc[:, 1:] * xc[:, :-1]).sum(1) / (xc * xc).sum(1)).mean())


def kurt(x):  # per-channel kurtosis (3 for a Gaussian), median over channels
    z = (x - x.mean(1, keepdims=True)) / x.std(1, keepdims=True)
    return float(np.median((z ** 4).mean(1)))


def pc1_share(x):  # mean over (layer, head) of the top eigenvalue share of the channel correlation
    L, T, H, D = x.shape
    if D < 2:
        return float('nan')
    shares = []
    for l in range(L):
        for h in range(H):
            ev = np.linalg.eigvalsh(np.corrcoef(x[l, :, h, :].T))
            shares.append(ev[-1] / ev.sum())
    return float(np.mean(shares))


def stats(a):
    k, v = a[:, 0], a[:, 1]
    u = unrope(k)
    kstd = k.std(1)
    rows = [
        ('K mean / std', '%.2f / %.2f' % (k.mean(), k.std())),
        ('K min / max', '%.1f / %.1f' % (k.min(), k.max())),
        ('K channel std: median', '%.2f' % np.median(kstd)),
        ('K channel std: max / median (outliers)', '%.2f' % (kstd.max() / np.median(kstd))),
        ('K max abs channel mean', '%.2f' % np.abs(k.mean(1)).max()),
        ('K lag-1 autocorrelation', '%.2f' % lag1(k)),
        ('K pre-RoPE lag-1 autocorrelation', '%.2f' % lag1(u)),
        ('K pre-RoPE bias RMS, per layer', ' '.join('%.2f' % np.sqrt((u[l].mean(0) ** 2).mean())
                                                   for l in range(len(u)))),
        ('K pre-RoPE channel std median, per layer', ' '.join('%.2f' % np.median(u[l].std(0))
                                                             for l in range(len(u)))),
        ('K pre-RoPE PC1 variance share', '%.2f' % pc1_share(u)),
        ('K kurtosis (pooled)', '%.2f' % (((k - k.mean()) ** 4).mean() / k.var() ** 2)),
        ('V mean / std', '%.2f / %.2f' % (v.mean(), v.std())),
        ('V min / max', '%.1f / %.1f' % (v.min(), v.max())),
        ('V std per layer', ' '.join('%.2f' % v[l].std() for l in range(len(v)))),
        ('V channel std: max / median', '%.2f' % (v.std(1).max() / np.median(v.std(1)))),
        ('V lag-1 autocorrelation', '%.2f' % lag1(v)),
        ('V kurtosis (per channel, median)', '%.2f' % kurt(v)),
        ('V kurtosis (pooled)', '%.2f' % (((v - v.mean()) ** 4).mean() / v.var() ** 2)),
        ('V PC1 variance share', '%.2f' % pc1_share(v)),
    ]
    return rows


def main(argv):
    if not argv:
        sys.exit(__doc__)
    tables = [stats(load(arg)) for arg in argv]
    for r in range(len(tables[0])):
        print('| ' + tables[0][r][0] + ' | ' + ' | '.join(t[r][1] for t in tables) + ' |')


if __name__ == '__main__':
    main(sys.argv[1:])
