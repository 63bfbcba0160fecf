#!/usr/bin/env python3
"""Replays late-claim.patch's dealing and claiming of a pair's units (the 12-warp fp16 decode
kernel) on the CPU, warps interleaved at random: every quantized block is attended exactly once,
every unquantized run once, and each warp's stage ring holds its blocks in issue order (the count of
blocks in flight is the ring's length). Mirrors the kernel's `first`, `blocks`, `dealt`, `claiming`,
`asked` and `in_flight` (hack_decode_fp16.cu with the patch); the counter hands out 0, 1, 2, ... in
the order the claims are asked, as an atomic does in some order.

    python3 bench/gpu/variants/late-claim-sim.py
"""
import random
K_STAGES, RUN = 3, 8
def sim(nb, nu, splits, W, rng):
    units = nb + (nu + RUN - 1) // RUN
    ps = (units + splits - 1) // splits
    dealt = splits * K_STAGES * W
    seen = {}
    counter = 0
    warps = []
    for s in range(splits):
        ub = min(units, s * ps); ue = min(units, ub + ps); qe = min(ue, nb)
        for w in range(W):
            first = s * K_STAGES * W + w
            blocks = min(K_STAGES, (nb - first + W - 1) // W) if first < nb else 0
            st = dict(s=s, w=w, ring=[], claiming=False, asked=None, in_flight=min(blocks, K_STAGES - 1))
            for i in range(K_STAGES - 1):
                if i < blocks: st['ring'].append(first + i * W)
            if blocks == K_STAGES:
                st['claiming'] = True; st['asked'] = ('static', first + (K_STAGES - 1) * W)
            elif blocks == K_STAGES - 1 and dealt < nb:
                st['claiming'] = True; st['asked'] = ('claim', counter); counter += 1
            st['tail'] = list(range(max(ub, qe) + w, ue, W))
            warps.append(st)
    live = [st for st in warps if st['in_flight'] > 0]
    while live:
        st = rng.choice(live)
        assert len(st['ring']) == st['in_flight']
        if st['claiming']:
            kind, v = st['asked']
            j = v if kind == 'static' else dealt + v
            st['claiming'] = j < nb
            if st['claiming']:
                st['asked'] = ('claim', counter); counter += 1
                st['ring'].append(j); st['in_flight'] += 1
        b = st['ring'].pop(0); st['in_flight'] -= 1
        seen[b] = seen.get(b, 0) + 1
        if st['in_flight'] == 0: live.remove(st)
    assert sorted(seen) == list(range(nb)) and all(v == 1 for v in seen.values()), (nb, nu, splits, W)
    tails = sorted(u for st in warps for u in st['tail'])
    assert tails == list(range(nb, units)), (nb, nu, splits, W, tails[:5])
rng = random.Random(1)
n = 0
for nb in list(range(0, 80)) + [511, 512, 513, 2047, 2048, 2049]:
    for nu in (0, 1, 8, 63):
        for splits in (1, 2, 3, 16):
            for W in (9, 12):
                for _ in range(3):
                    sim(nb, nu, splits, W, rng); n += 1
print("ok", n, "shapes x interleavings")
