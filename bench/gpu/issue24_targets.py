#!/usr/bin/env python3
"""Issue 24's §1 and §2 targets, measured in one call on the GPU machine.

kvdepot's fp16 decode (`kvdepot_hack_bench --only decode --decode-math fp16 --decode-io bf16
--decode-rows graph`) and staged fp16 prefill (`--only prefill --prefill-math fp16
--prefill-staged on --prefill-io bf16`) against torch SDPA bf16 (bench/gpu/torch_sdpa.py), both
sides replayed from CUDA graphs over K/V larger than L2, in alternating rounds (kvdepot first in
even rounds, SDPA first in odd ones), with the SM clock, power and throttle reasons sampled by
nvidia-smi beside every step. Prints one Markdown table: per shape the median over rounds of
each side's median, the ratio (SDPA time / kvdepot time), the target and whether it is met on
this card; writes the JSON rows, the clock log and the table under --out.

The targets are issue 24's, set on an H200: the absolute ones (128K batch 1 <= 35 us, 4K batch 1
<= 9 us) are H200 times, so on another card the table marks them "(H200 target)" and judges them
anyway. The ratios are the same call's, so they carry over between cards only as far as both
sides scale alike (docs/hack-gpu.md, "Measured").

Usage (GPU machine, binaries built here by `make gpu` and carried as .gpu/bin):
  python3 bench/gpu/issue24_targets.py [--bin .gpu/bin] [--rounds 2] [--out DIR] [--reps 100]
Exit status: 0 when every step ran (met or not), 1 when a step failed, 2 on bad arguments.
On the lent GPU machine, write --out outside $OUT and tar it into $OUT (few files come back).
"""
import argparse
import csv
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

# The shapes timed: decode (batch, tokens), prefill (new queries, cached prefix).
DECODE_SHAPES = [(b, t) for b in (1, 16) for t in (4096, 32768, 131072)]
PREFILL_SHAPES = [(1024, 0), (4096, 0), (4096, 28672), (1024, 130048)]

# Targets: key -> list of (kind, bound, text). kind "max_us": kvdepot's time at most bound (an
# H200 time); "min_ratio": SDPA / kvdepot at least bound.
TARGETS = {
    ("decode", 1, 4096): [("max_us", 9.0, "≤ 9 µs"), ("min_ratio", 1.35, "≥ 1.35×")],
    ("decode", 1, 131072): [("max_us", 35.0, "≤ 35 µs"), ("min_ratio", 3.8, "≥ 3.8×")],
    ("decode", 16, 32768): [("min_ratio", 4.0, "≥ 4×")],
    ("decode", 16, 131072): [("min_ratio", 4.0, "≥ 4×")],
    ("prefill", 4096, 0): [("min_ratio", 1.0, "no slower")],
    ("prefill", 4096, 28672): [("min_ratio", 1.0, "no slower"),
                               ("min_ratio", 1.3, "stretch ≥ 1.3×")],
    ("prefill", 1024, 130048): [("min_ratio", 1.0, "no slower")],
}
SECTION = {"decode": "§2", "prefill": "§1"}
# nvidia-smi's clocks_throttle_reasons.active bits, as its --help-query-gpu names them.
REASONS = {0x4: "SW power cap", 0x8: "HW slowdown", 0x20: "SW thermal", 0x40: "HW thermal",
           0x80: "HW power brake"}


def kvdepot_key(row):
    """The table key of a kvdepot_hack_bench JSON row, or None for rows the table skips."""
    op, config = row.get("op", ""), row.get("config", "")
    if op == "decode-graph-fp16":
        return ("decode", row["batch"], row["tokens"])
    if op in ("prefill-fp16-staged", "prefill-chunked-fp16-staged"):
        # config: "<queries> queries over <prefix> cached, ..."
        words = config.split()
        if len(words) >= 4 and words[1] == "queries" and words[2] == "over":
            return ("prefill", int(words[0]), int(words[3]))
    return None


def sdpa_key(row):
    """The table key of a torch_sdpa.py JSON row (graph-replayed rows only), or None."""
    op = row.get("op", "")
    if op == "decode-graph":
        return ("decode", row["batch"], row["tokens"])
    if op in ("prefill-graph", "prefill-chunked-graph"):
        return ("prefill", row["queries"], row["prefix"])
    return None


def shape_text(key):
    kind, a, b = key
    if kind == "decode":
        return f"decode batch {a}, {b // 1024}K"
    if b == 0:
        return f"prefill {a // 1024}K prompt"
    return f"prefill {a // 1024}K new over {b / 1024:g}K cached"


def judge(key, ours_us, sdpa_us, on_h200):
    """[(target text, met)] for one shape."""
    out = []
    ratio = sdpa_us / ours_us
    for kind, bound, text in TARGETS.get(key, []):
        if kind == "max_us":
            met = ours_us <= bound
            out.append((text + ("" if on_h200 else " (H200 target)"), met))
        else:
            out.append((text, ratio >= bound))
    return out


def table(rows_ours, rows_sdpa, device):
    """The Markdown table (a list of lines) from the JSON rows of every round."""
    ours, sdpa = {}, {}
    for row in rows_ours:
        key = kvdepot_key(row)
        if key is not None:
            ours.setdefault(key, []).append(row["median_us"])
    for row in rows_sdpa:
        key = sdpa_key(row)
        if key is not None:
            sdpa.setdefault(key, []).append(row["median_us"])
    on_h200 = "H200" in device
    lines = [f"Device: {device}. Times: the median over rounds of each run's median (µs); "
             "ratio = SDPA bf16 time / kvdepot time.", "",
             "| § | shape | kvdepot µs (runs) | SDPA bf16 graph µs (runs) | ratio | target | met |",
             "|---|---|---:|---:|---:|---|---|"]
    order = [("decode", b, t) for b, t in DECODE_SHAPES] + [("prefill", n, p)
                                                            for n, p in PREFILL_SHAPES]
    for key in order + sorted(k for k in set(ours) | set(sdpa) if k not in order):
        if key not in ours or key not in sdpa:
            if key in ours or key in sdpa:
                lines.append(f"| {SECTION[key[0]]} | {shape_text(key)} | "
                             f"{runs(ours.get(key))} | {runs(sdpa.get(key))} | — | — | "
                             "missing a side |")
            continue
        o, s = statistics.median(ours[key]), statistics.median(sdpa[key])
        verdicts = judge(key, o, s, on_h200)
        target = "; ".join(t for t, _ in verdicts) or "—"
        met = "; ".join("yes" if m else "**no**" for _, m in verdicts) or "—"
        lines.append(f"| {SECTION[key[0]]} | {shape_text(key)} | {o:,.2f} ({runs(ours[key])}) | "
                     f"{s:,.2f} ({runs(sdpa[key])}) | {s / o:.2f}× | {target} | {met} |")
    return lines


def runs(values):
    return "—" if not values else ", ".join(f"{v:,.2f}" for v in values)


def clocks(smi_path, windows):
    """Per step: (label, median SM MHz, min, max, max W, throttle reasons seen) over the log's
    samples inside the step's window in which the GPU was not idle."""
    samples = []
    try:
        with open(smi_path, newline="") as f:
            for rec in csv.reader(f):
                if len(rec) < 4:
                    continue
                try:
                    stamp = datetime.datetime.strptime(rec[0].strip(), "%Y/%m/%d %H:%M:%S.%f")
                    sample = (stamp.timestamp(), float(rec[1]), float(rec[2]), int(rec[3], 16))
                except ValueError:
                    continue  # the header, or a field nvidia-smi could not read ("[N/A]")
                if not sample[3] & 1:  # bit 0: the GPU idle (between calls, torch starting up)
                    samples.append(sample)
    except OSError:
        return []
    out = []
    for label, t0, t1 in windows:
        inside = [s for s in samples if t0 <= s[0] <= t1]
        if not inside:
            continue
        mhz = [s[1] for s in inside]
        reasons = sorted({REASONS.get(s[3], hex(s[3])) for s in inside if s[3]})
        out.append((label, statistics.median(mhz), min(mhz), max(mhz),
                    max(s[2] for s in inside), reasons))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=".gpu/bin", help="folder of kvdepot_hack_bench")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--out", default=os.environ.get("OUT", "issue24-out"))
    ap.add_argument("--only", choices=("", "decode", "prefill"), default="")
    ap.add_argument("--prefill-verify-max", type=int, default=4096,
                    help="kvdepot_hack_bench checks prefill rows of up to this many tokens against "
                         "its float64 CPU reference (32K takes minutes there; the GPU tests check "
                         "the chunked shapes)")
    args = ap.parse_args()
    bench = os.path.join(args.bin, "kvdepot_hack_bench")
    if args.rounds < 1 or args.reps < 50 or not os.access(bench, os.X_OK):
        print(f"issue24_targets: needs --rounds >= 1, --reps >= 50 and an executable {bench} "
              "(build it here with `make gpu`, carry .gpu/bin)", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    sdpa_py = os.path.join(here, "torch_sdpa.py")
    # kvdepot_hack_bench truncates its --json file: one file per run (kvdepot-<round>-<step>.jsonl,
    # in place of ours_json); torch_sdpa.py appends to one.
    ours_json, sdpa_json = os.path.join(args.out, "kvdepot-OURS.jsonl"), os.path.join(args.out,
                                                                                      "sdpa.jsonl")
    for name in os.listdir(args.out):
        if name.endswith(".jsonl"):
            os.remove(os.path.join(args.out, name))
    smi_path = os.path.join(args.out, "smi.csv")
    smi_log = open(smi_path, "w")
    try:
        smi = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,"
             "clocks_throttle_reasons.active", "--format=csv,noheader,nounits", "-lms", "50"],
            stdout=smi_log, stderr=subprocess.DEVNULL)
    except OSError:
        smi = None
    try:
        device = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                capture_output=True, text=True).stdout.strip().splitlines()[0]
    except (OSError, IndexError):
        device = "unknown GPU"

    lengths = ",".join(str(t) for t in sorted({t for _, t in DECODE_SHAPES}))
    prompts = ",".join(str(n) for n, p in PREFILL_SHAPES if p == 0)
    chunked = ",".join(f"{n}:{p}" for n, p in PREFILL_SHAPES if p > 0)
    common = ["--reps", str(args.reps), "--warmup", "5"]
    steps = []  # (side, label, command)
    for batch in (1, 16):
        steps.append([
            ("kvdepot", f"decode b{batch}",
             [bench, "--only", "decode", "--decode-math", "fp16", "--decode-io", "bf16",
              "--decode-rows", "graph", "--lengths", lengths, "--batches", str(batch),
              "--json", ours_json] + common),
            ("sdpa", f"decode b{batch}",
             [sys.executable, sdpa_py, "--graph", "--only", "decode", "--lengths", lengths,
              "--batches", str(batch), "--json", sdpa_json] + common)])
    steps.append([
        ("kvdepot", "prefill",
         [bench, "--only", "prefill", "--prefill-math", "fp16", "--prefill-staged", "on",
          "--prefill-io", "bf16", "--prefill-lengths", prompts, "--chunked", chunked,
          "--prefill-verify-max", str(args.prefill_verify_max), "--json", ours_json] + common),
        ("sdpa", "prefill",
         [sys.executable, sdpa_py, "--graph", "--only", "prefill", "--prefill-lengths", prompts,
          "--chunked", chunked, "--json", sdpa_json] + common)])
    if args.only:
        steps = [pair for pair in steps if pair[0][1].startswith(args.only)]

    windows, failed = [], 0
    log = open(os.path.join(args.out, "steps.log"), "w")
    for r in range(args.rounds):
        for pair in steps:
            for side, label, cmd in (pair if r % 2 == 0 else pair[::-1]):
                tag = f"r{r + 1}-{label.replace(' ', '-')}"
                per_run = os.path.join(args.out, f"kvdepot-{tag}.jsonl")
                cmd = [per_run if c == ours_json else c for c in cmd]
                t0 = time.time()
                proc = subprocess.run(cmd, capture_output=True, text=True)
                t1 = time.time()
                windows.append((f"round {r + 1} {side} {label}", t0, t1))
                log.write(f"== round {r + 1} {side} {label} ({t1 - t0:.1f} s, rc "
                          f"{proc.returncode}): {' '.join(cmd)}\n{proc.stdout}{proc.stderr}\n")
                log.flush()
                print(f"round {r + 1} {side} {label}: {t1 - t0:.1f} s, rc {proc.returncode}",
                      flush=True)
                if proc.returncode != 0:
                    failed += 1
                    sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-2000:])
    log.close()
    if smi is not None:
        smi.terminate()
        smi.wait()
    smi_log.close()

    def rows(path):
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]

    ours_rows = []
    for name in sorted(os.listdir(args.out)):
        if name.startswith("kvdepot-") and name.endswith(".jsonl"):
            ours_rows += rows(os.path.join(args.out, name))
    lines = table(ours_rows, rows(sdpa_json), device)
    seen = clocks(smi_path, windows)
    if seen:
        lines += ["", "| step | SM MHz median (min–max) | max W | throttle reasons |",
                  "|---|---|---:|---|"]
        lines += [f"| {label} | {med:.0f} ({lo:.0f}–{hi:.0f}) | {watts:.0f} | "
                  f"{', '.join(reasons) or 'none'} |" for label, med, lo, hi, watts, reasons in seen]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "targets.md"), "w") as f:
        f.write(text)
    print(text, end="")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
