#!/usr/bin/env python3
"""The rows `scripts/gpu-variants.sh run` prints ("DIR batch tokens µs", each folder's rows twice)
as a Markdown table for docs/benchmarks.md: per shape, each folder's runs and, beside every folder
but the base, the change of its mean against the base folder's mean in the same output.

Usage: scripts/gpu-variants-table.py FILE [BASE_DIR]   (FILE: the run's output, - for stdin;
       BASE_DIR: the folder the others are compared with, default the first one seen)
Lines that are not rows (test output, FAILED lines, SDPA's) are skipped.
"""
import collections
import sys


def parse(lines):
    """{(dir, batch, tokens): [µs, ...]}, dirs and shapes in the order first seen."""
    runs = collections.defaultdict(list)
    dirs, shapes = [], []
    for line in lines:
        parts = line.split()
        if len(parts) != 4:
            continue
        try:
            batch, tokens, us = int(parts[1]), int(parts[2]), float(parts[3])
        except ValueError:
            continue
        d = parts[0]
        runs[(d, batch, tokens)].append(us)
        if d not in dirs:
            dirs.append(d)
        if (batch, tokens) not in shapes:
            shapes.append((batch, tokens))
    return runs, dirs, shapes


def name(d):
    d = d.rstrip('/')
    if d.endswith('/bin'):
        d = d[:-len('/bin')]
    return d[len('.gpu-'):] if d.startswith('.gpu-') else d


def table(runs, dirs, shapes, base):
    out = ['| batch, tokens | ' + ' | '.join(name(d) for d in dirs) + ' |',
           '|---|' + '---:|' * len(dirs)]
    for batch, tokens in shapes:
        base_runs = runs.get((base, batch, tokens), [])
        base_mean = sum(base_runs) / len(base_runs) if base_runs else None
        cells = []
        for d in dirs:
            v = runs.get((d, batch, tokens), [])
            if not v:
                cells.append('—')
                continue
            text = ' / '.join(f'{x:.2f}' for x in v)
            if d != base and base_mean:
                text += f' ({(sum(v) / len(v) / base_mean - 1) * 100:+.1f}%)'
            cells.append(text)
        out.append(f'| {batch}, {tokens} | ' + ' | '.join(cells) + ' |')
    return '\n'.join(out)


def main(argv):
    if len(argv) not in (2, 3):
        sys.stderr.write(__doc__)
        return 2
    lines = sys.stdin if argv[1] == '-' else open(argv[1], encoding='utf-8')
    runs, dirs, shapes = parse(lines)
    if not dirs:
        sys.stderr.write('gpu-variants-table: no rows ("DIR batch tokens µs") in the input\n')
        return 1
    base = argv[2] if len(argv) == 3 else dirs[0]
    if base not in dirs:
        sys.stderr.write(f'gpu-variants-table: no rows of {base} (folders: {", ".join(dirs)})\n')
        return 1
    print(table(runs, dirs, shapes, base))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
