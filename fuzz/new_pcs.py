#!/usr/bin/env python3
"""When did a libFuzzer campaign find its new coverage, and where? (docs/fuzzing.md, "Eighth session")

Reads the log of a run with -print_pcs=1 (each `NEW_PC: 0x... in FUNCTION FILE:LINE` line is
followed by the `#N NEW cov: ...` line of the unit that found it) and prints one line per new PC:
minutes since the start (runs / the average exec/s libFuzzer printed with it), the cov count, a
category and the location. Then, per category, how many new PCs and the minute of the last one.

Categories (first match wins; everything else is "input"):
  timing   code that runs when a timer fires or a compare-and-swap retries, not because of the
           input: the listeners' timeout check, the watchdog, atomic retries
  harness  the fuzz targets' own client side (not instrumented since the seventh session)
  value    a new branch of an inlined standard-library or numeric helper on a path already
           covered (std::to_string's digit count, a std::string's short or heap storage,
           HalfBitsToFloat's exponent classes): a new class of value at that call site, not new
           code

Usage: fuzz/new_pcs.py LOG [--after MINUTES]   (only list PCs found after MINUTES)
Exit status: 0, or 2 when LOG has no INITED line.
"""
import argparse
import re
import sys

CATEGORIES = [
    ("timing", re.compile(r"ConnectionTimeouts::Check|Watchdog|compare_exchange|"
                          r"HostTier::Reserve\(")),
    ("harness", re.compile(r"/fuzz/targets/|kvdepot::fuzz::")),
    ("value", re.compile(r"__to_chars_len|__to_chars_10|to_string|_M_dispose|_M_destroy|"
                         r"HalfBitsToFloat|Bf16BitsToFloat|FloatToHalfBits|FloatToBf16Bits")),
]
STAT = re.compile(r"^#(\d+)\s+(\w+)\s+cov: (\d+) ft: (\d+).*?exec/s: (\d+)")
NEW_PC = re.compile(r"NEW_PC: (0x[0-9a-f]+) in (.*)$")


def category(where):
    for name, pattern in CATEGORIES:
        if pattern.search(where):
            return name
    return "input"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--after", type=float, default=0.0)
    args = ap.parse_args()
    pending, found, inited, last = [], [], None, None
    with open(args.log, errors="replace") as f:
        for line in f:
            m = NEW_PC.search(line)
            if m:
                pending.append((m.group(1), m.group(2).strip()))
                continue
            m = STAT.match(line)
            if not m:
                continue
            runs, kind, cov, eps = int(m[1]), m[2], int(m[3]), max(int(m[5]), 1)
            if kind == "INITED":
                inited = cov
            minutes = runs / eps / 60.0
            found += [(minutes, cov, pc, where) for pc, where in pending]
            pending = []
            last = (minutes, cov, runs)
    if inited is None:
        print(f"new_pcs: {args.log}: no INITED line (not a libFuzzer log?)", file=sys.stderr)
        return 2
    summary = {}
    for minutes, cov, pc, where in found:
        cat = category(where)
        count, _ = summary.get(cat, (0, 0.0))
        summary[cat] = (count + 1, minutes)
        if minutes >= args.after:
            print(f"{minutes:7.1f} min  cov {cov:5d}  {cat:8s} {pc}  {where[:160]}")
    print(f"# INITED cov {inited}; last stats line: {last[2]} runs, ~{last[0]:.1f} min, "
          f"cov {last[1]}")
    for cat in ("input", "value", "timing", "harness"):
        if cat in summary:
            count, minutes = summary[cat]
            print(f"# {cat:8s} {count:4d} new PCs, the last at ~{minutes:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
