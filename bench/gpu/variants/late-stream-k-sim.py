#!/usr/bin/python3
"""The index arithmetic of late-stream-k.patch, replayed on the CPU over 5,109 shapes (pairs 1..131,
padded unit counts 1..2,049, 9 / 12 / 16 warps, the host's grid of min(132, 30 pairs) CTAs): every
(pair, unit) is taken by exactly one warp, a CTA has at most one crossing warp, each slot's query
fragments have exactly one writer before their first reader, and the partials a pair's merge reads
are exactly those its contributors write (at most 32). The formulas are the kernel's, transcribed;
this checks the scheme, not the CUDA (kvdepot_gpu_tests does that on the GPU machine)."""
def sim(pairs, U, C, W):
    total = pairs*U; run = (total + C - 1)//C
    covered = [0]*total
    writes = {}   # (cta, slot) -> the pair whose partial it writes
    for c in range(C):
        v0 = min(total, c*run); v1 = min(total, v0+run)
        if v0 == v1: continue
        pair0 = v0//U
        boundary = (pair0+1)*U if (pair0+1)*U < v1 else (1<<32)-1
        n = v1-v0
        first1 = W; crossing = False
        for w in range(W):
            a = v0 + w*n//W; b = v0+(w+1)*n//W
            if a < boundary and b > boundary: crossing = True
            if a >= boundary and a < b and first1 == W: first1 = w
        ncross = 0
        slot_writers = {0: [], 1: []}; slot1_prologue_users = False
        for w in range(W):
            w0 = v0 + w*n//W; w1 = v0+(w+1)*n//W
            lo0, hi0, hi1, parts = w0, w1, 0, 1
            if w0 < boundary and w1 > boundary: hi0, hi1, parts = boundary, w1, 2; ncross += 1
            for part in range(parts):
                plo = lo0 if part == 0 else boundary; phi = hi0 if part == 0 else hi1
                pair = pair0+1 if plo >= boundary else pair0
                assert pair < pairs
                slot = pair - pair0
                lo = plo - pair*U; hi = phi - pair*U
                assert 0 <= lo <= hi <= U, (lo, hi)
                for u in range(lo, hi): covered[pair*U+u] += 1
                writer = (w == 0) if slot == 0 else ((w == first1) if part == 0 else (first1 == W))
                if writer: slot_writers[slot].append((w, part))
                if part == 0: slot1_prologue_users |= slot == 1
                else:
                    # crossing warp uses slot 1 after switch: must be written by a prologue writer or itself
                    assert first1 < W or writer
        assert ncross <= 1 and crossing == (ncross == 1)
        # slot 0 written exactly once in prologue (warp 0)
        assert slot_writers[0] == [(0, 0)], slot_writers
        if slot1_prologue_users:
            assert any(p == 0 for _, p in slot_writers[1]) and len(slot_writers[1]) == 1, (slot_writers, first1)
        slots = 2 if boundary != (1<<32)-1 else 1
        for sl in range(slots): writes[(c, sl)] = pair0+sl
    assert all(x == 1 for x in covered), 'coverage'
    # contributors
    for pr in range(pairs):
        first = pr*U//run; last = min(C-1, ((pr+1)*U-1)//run); count = last-first+1
        assert count <= 32 or C > 30*pairs, count
        got = sorted(2*c+sl for (c, sl), p in writes.items() if p == pr)
        exp = sorted(2*c + (0 if c*run//U == pr else 1) for c in range(first, last+1))
        assert got == exp, (pr, got, exp)
n = 0
for pairs in list(range(1, 132)):
    for U in [1, 2, 3, 5, 7, 64, 97, 110, 129, 513, 520, 783, 2049]:
        for W in [9, 12, 16]:
            C = min(132, 30*pairs)
            if pairs >= C: continue
            sim(pairs, U, C, W); n += 1
print('ok', n, 'configs')
