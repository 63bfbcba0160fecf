#!/usr/bin/env python3
"""Times torch.nn.functional.scaled_dot_product_attention in bf16 for the shapes of
kvdepot_hack_bench (docs/hack-gpu.md): the baseline the HACK INT2 kernels are compared with.

  decode:  q [B, 64, 1, 128], k/v [B, 8, L, 128] (GQA: enable_gqa=True where torch has it, else
           q reshaped to [B, 8, 8, 128] against the 8 KV heads, which is the same computation),
           B in {1, 16}, L in {4K, 32K, 128K};
  prefill: q [1, 64, L, 128], k/v [1, 8, L, 128], causal, L in {1K, 4K};
  chunked prefill (--chunked NEW:PREFIX,...): q [1, 64, NEW, 128] at positions PREFIX.. over
           k/v [1, 8, PREFIX + NEW, 128], causal aligned to the bottom right
           (torch.nn.attention.bias.causal_lower_right): the call an engine makes after a prefix
           hit, with the prefix cached in bf16.

--graph adds the way engines run attention: "-graph" rows capture G calls (each over the next of
the rotating K/V sets; decode: G >= 16 and a multiple of the set count, prefill: one call per
set) into a torch.cuda.CUDAGraph once and time its replays, reported per call. Without graphs a
small call measures Python and launch overhead (decode at 4K: ~23 us unreplayed against ~12 us
replayed on an H200). Each row names the CUDA kernels one call ran ("kernels").

Random normal inputs, never zero. Each variant rotates over enough copies of K/V that together
they are at least 3x the L2 size (and at least 2). Times are CUDA event intervals around one call
("decode", "prefill") or around 8 calls enqueued back to back, reported per call
("decode-stream", as kvdepot_hack_bench's); the median over --reps (>= 50) timed reps after
--warmup reps is printed, one JSON object per line (also appended to --json FILE). "bytes" = the
bf16 K and V read (plus q and the output).

Exit status: 0 ok, 1 a --check failed, 3 torch or CUDA unavailable, 64 bad usage.
"""
import argparse
import json
import math
import statistics
import sys

STREAM_CALLS = 8  # calls per rep of the "decode-stream" rows, as kvdepot_hack_bench


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="", help="append JSON lines to this file")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--lengths", default="4096,32768,131072")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--prefill-lengths", default="1024,4096")
    ap.add_argument("--chunked", default="", help="NEW:PREFIX,... chunked prefill shapes")
    ap.add_argument("--graph", action="store_true", help="also time CUDA-graph replays")
    ap.add_argument("--only", default="", choices=["", "decode", "prefill"])
    ap.add_argument("--q-heads", type=int, default=64, help="query heads (8 KV heads, d 128)")
    ap.add_argument("--check", action="store_true",
                    help="check each prefill shape's SDPA output against fp32 math attention "
                         "(\"check_max_rel\" in its rows; exit 1 above 2e-2)")
    args = ap.parse_args()
    if args.reps < 50 or args.warmup < 1:
        print("torch_sdpa: --reps must be >= 50 and --warmup >= 1", file=sys.stderr)
        return 64
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001 - any import failure means "no torch here"
        print(f"torch_sdpa: torch is not importable ({e}); skipping", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("torch_sdpa: no CUDA device; skipping", file=sys.stderr)
        return 3

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 64 << 20)
    q_heads, kv_heads, dim = args.q_heads, 8, 128
    group = q_heads // kv_heads
    scale = 1.0 / math.sqrt(dim)
    gen = torch.Generator(device=dev)
    gen.manual_seed(1)

    def randn(*shape):
        x = torch.randn(*shape, device=dev, dtype=torch.float32, generator=gen)
        x[x == 0] = 0.5
        return x.to(torch.bfloat16)

    try:
        F.scaled_dot_product_attention(randn(1, 8, 1, 16), randn(1, 2, 4, 16), randn(1, 2, 4, 16),
                                       enable_gqa=True)
        has_gqa = True
    except TypeError:
        has_gqa = False

    out_file = open(args.json, "a") if args.json else None
    failed_checks = 0

    def timed(fn, sets, calls=1):
        """`calls` calls per rep over rotating sets (more than 1: back to back, time per call)."""
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        us = []
        for rep in range(args.warmup + args.reps):
            start.record()
            for c in range(calls):
                fn((rep + c) % sets)
            stop.record()
            stop.synchronize()
            if rep >= args.warmup:
                us.append(start.elapsed_time(stop) * 1000.0 / calls)
        return statistics.median(us), min(us)

    def graph_timed(fn, sets, calls):
        """Captures `calls` calls (call c over set c % sets) into one CUDA graph; times replays,
        per call."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for c in range(max(3, sets)):
                fn(c % sets)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for c in range(calls):
                fn(c % sets)
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        us = []
        for rep in range(args.warmup + args.reps):
            start.record()
            graph.replay()
            stop.record()
            stop.synchronize()
            if rep >= args.warmup:
                us.append(start.elapsed_time(stop) * 1000.0 / calls)
        del graph
        return statistics.median(us), min(us)

    def kernels(fn):
        """The names of the CUDA kernels one call runs (which SDPA backend torch picked)."""
        try:
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fn(0)
                torch.cuda.synchronize()
            names = [e.name for e in prof.events()
                     if str(getattr(e, "device_type", "")).endswith("CUDA")]
        except Exception as e:  # noqa: BLE001 - the profiler is a diagnostic only
            return f"unknown ({type(e).__name__})"
        return ";".join(n[:80] for n in names[:4])

    def emit(row):
        row.update({"bench": "torch_sdpa", "device": props.name, "torch": torch.__version__,
                    "reps": args.reps})
        line = json.dumps(row)
        print(line, flush=True)
        if out_file:
            out_file.write(line + "\n")
            out_file.flush()

    with torch.inference_mode():
        for batch in [int(b) for b in args.batches.split(",")] if args.only != "prefill" else []:
            for length in [int(n) for n in args.lengths.split(",")]:
                kv_bytes = 2 * batch * kv_heads * length * dim * 2
                sets = max(2, math.ceil(3 * l2 / kv_bytes))
                ks = [randn(batch, kv_heads, length, dim) for _ in range(sets)]
                vs = [randn(batch, kv_heads, length, dim) for _ in range(sets)]
                q = randn(batch, q_heads, 1, dim)
                if has_gqa:
                    def call(s, q=q, ks=ks, vs=vs):
                        return F.scaled_dot_product_attention(q, ks[s], vs[s], scale=scale,
                                                              enable_gqa=True)
                    mode = "enable_gqa"
                else:
                    qg = q.view(batch, kv_heads, group, dim)

                    def call(s, qg=qg, ks=ks, vs=vs):
                        return F.scaled_dot_product_attention(qg, ks[s], vs[s], scale=scale)
                    mode = "grouped-q"
                read = kv_bytes + 2 * batch * q_heads * dim * 2
                names = kernels(call)
                for op, calls in (("decode", 1), ("decode-stream", STREAM_CALLS)):
                    med, mn = timed(call, sets, calls)
                    emit({"op": op, "batch": batch, "tokens": length, "gqa": mode,
                          "calls": calls, "median_us": round(med, 3), "min_us": round(mn, 3),
                          "bytes": read, "gbps": round(read / (med * 1e3), 2), "sets": sets,
                          "kernels": names})
                if args.graph:
                    calls = -(-16 // sets) * sets
                    med, mn = graph_timed(call, sets, calls)
                    emit({"op": "decode-graph", "batch": batch, "tokens": length, "gqa": mode,
                          "calls": calls, "median_us": round(med, 3), "min_us": round(mn, 3),
                          "bytes": read, "gbps": round(read / (med * 1e3), 2), "sets": sets,
                          "kernels": names})
                del ks, vs
                torch.cuda.empty_cache()

        shapes = [(int(n), 0) for n in args.prefill_lengths.split(",") if n]
        shapes += [tuple(int(x) for x in c.split(":")) for c in args.chunked.split(",") if c]
        for new, prefix in shapes if args.only != "decode" else []:
            length = prefix + new
            kv_bytes = 2 * kv_heads * length * dim * 2
            sets = max(2, math.ceil(3 * l2 / kv_bytes))
            ks = [randn(1, kv_heads, length, dim) for _ in range(sets)]
            vs = [randn(1, kv_heads, length, dim) for _ in range(sets)]
            q = randn(1, q_heads, new, dim)
            mask = None
            if prefix > 0:
                from torch.nn.attention.bias import causal_lower_right
                mask = causal_lower_right(new, length)
            causal = dict(is_causal=True) if mask is None else dict(attn_mask=mask)
            if has_gqa:
                def call(s, q=q, ks=ks, vs=vs, causal=causal):
                    return F.scaled_dot_product_attention(q, ks[s], vs[s], scale=scale,
                                                          enable_gqa=True, **causal)
                mode = "enable_gqa"
                try:
                    call(0)
                except Exception:  # noqa: BLE001 - this torch's CausalBias lacks GQA
                    has_gqa_here = False
                else:
                    has_gqa_here = True
            else:
                has_gqa_here = False
            if not has_gqa_here:
                kr = [k.repeat_interleave(group, dim=1) for k in ks]
                vr = [v.repeat_interleave(group, dim=1) for v in vs]

                def call(s, q=q, kr=kr, vr=vr, causal=causal):
                    return F.scaled_dot_product_attention(q, kr[s], vr[s], scale=scale, **causal)
                mode = "repeat_interleave"
            names = kernels(call)
            extra = {}
            if args.check:
                k32 = ks[0].float().repeat_interleave(group, dim=1)
                v32 = vs[0].float().repeat_interleave(group, dim=1)
                scores = (q.float() @ k32.transpose(-1, -2)) * scale
                keep = torch.ones(new, length, dtype=torch.bool, device=dev).tril(prefix)
                want = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1) @ v32
                err = ((call(0).float() - want).abs().max() / want.abs().max()).item()
                extra["check_max_rel"] = round(err, 6)
                failed_checks += err > 2e-2
                del k32, v32, scores, want
            pairs = new * prefix + new * (new + 1) / 2
            op = "prefill" if prefix == 0 else "prefill-chunked"
            rows = [(op, 1) + timed(call, sets)]
            if args.graph:
                rows.append((op + "-graph", sets) + graph_timed(call, sets, sets))
            for name, calls, med, mn in rows:
                emit({"op": name, "batch": 1, "tokens": length, "queries": new,
                      "prefix": prefix, "gqa": mode, "calls": calls, "sets": sets,
                      "median_us": round(med, 3), "min_us": round(mn, 3),
                      "tops": round(4.0 * q_heads * dim * pairs / (med * 1e6), 2),
                      "kernels": names, **extra})
            del ks, vs
            torch.cuda.empty_cache()
    if out_file:
        out_file.close()
    return 1 if failed_checks else 0


if __name__ == "__main__":
    sys.exit(main())
