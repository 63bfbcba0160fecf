#!/usr/bin/python3
"""Replays unread-rows-lazy-max.patch's softmax rule for one warp and one head on the CPU: a block of
64 scores is done against the running maximum m as it stands when its p = 2^(s - m), rounded to fp16
as P (times 2^8, the largest of the kernel's per-key 2^(8 - 2k) factors), sum to less than 2^7;
otherwise (and for the first block) m moves on to the block's maximum and O and l are corrected,
as the kernel always did ("usual"). Prints, per score distribution, both rules' relative L2 error
against exact attention (float64) and how many blocks fell back. P V and the sums are float64 here:
only the rounding the rule changes (P's) is modelled.

Usage: bench/gpu/variants/lazy-max-sim.py   (needs numpy: python3-numpy)
"""
import numpy as np

BLOCK = 64
LAZY_BOUND = 128.0  # sum of p below 2^7: every p < 2^7, so p 2^8 < 2^15 fits fp16


def fp16_p(p):
    """p as the kernel's fp16 P holds it (p 2^8 rounded to fp16, then the 2^8 taken back)."""
    with np.errstate(over='ignore'):
        return (p * 256.0).astype(np.float16).astype(np.float64) / 256.0


def attend(scores, values, lazy):
    """(output, blocks that fell back, blocks done lazily) for scores [blocks, 64], values
    [blocks, 64, D]."""
    m, l = -np.inf, 0.0
    o = np.zeros(values.shape[2])
    fell_back = done_lazily = 0
    for s, v in zip(scores, values):
        pb = None
        if lazy and m != -np.inf:
            pb = fp16_p(np.exp2(s - m))
            if np.all(np.isfinite(pb)) and pb.sum() < LAZY_BOUND:
                done_lazily += 1
            else:
                pb = None
                fell_back += 1
        if pb is None:
            m_new = max(m, s.max())
            corr = 0.0 if m == -np.inf else np.exp2(m - m_new)
            m, l, o = m_new, l * corr, o * corr
            pb = fp16_p(np.exp2(s - m))
        l += pb.sum()
        o += pb @ v
    return o / l, fell_back, done_lazily


def main():
    rng = np.random.default_rng(1)
    blocks, dim = 32, 16
    for spread in (1, 3, 6, 12, 40):  # log2 units
        for trend in (0.0, 0.5, 3.0):  # added per block: later (more recent) keys favoured
            scores = rng.normal(0.0, spread, (blocks, BLOCK)) + trend * np.arange(blocks)[:, None]
            values = rng.normal(size=(blocks, BLOCK, dim))
            flat = scores.reshape(-1)
            w = np.exp2(flat - flat.max())
            exact = (w @ values.reshape(-1, dim)) / w.sum()

            def error(out):
                return np.linalg.norm(out - exact) / np.linalg.norm(exact)

            lazy, fell_back, done_lazily = attend(scores, values, True)
            usual, _, _ = attend(scores, values, False)
            print(f'spread {spread:3} trend {trend:3}: rel. L2 lazy {error(lazy):.2e} '
                  f'usual {error(usual):.2e}, fell back {fell_back:2}, lazy {done_lazily:2}')


if __name__ == '__main__':
    main()
