#!/usr/bin/python3
"""Instruction classes of an sm_90 cubin's kernels, on a machine without cuobjdump or nvdisasm.

The dev VM has nvcc and ptxas but no disassembler, and the GPU machine is lent only at times. This
names each 16-byte sm_90 instruction by its opcode (the first word's low 12 bits, which name the
operation and its operand form) from a table learned from `cuobjdump -sass` listings of this
project's own cubins (scripts/sass-opcodes.json), and decodes BRA targets, so that a kernel
variant's register spills (STL / LDL) and its hottest loop's instruction mix can be read before a
GPU runs it (docs/cuda.md, "Before a GPU runs them"). Operands, predicates and modifiers are not
decoded; an opcode the table lacks prints as ?XXX (learn it from a listing).

Usage:
  scripts/sass-classes.py CUBIN [NAME_PART] [--mix]
      per kernel whose mangled name contains NAME_PART: instructions, STL / LDL / HMMA counts, and
      the three loops (backward branches) holding the most HMMAs, the shortest first among equals;
      --mix adds the first one's opcode histogram
  scripts/sass-classes.py --learn LISTING.sass [...]
      adds the opcodes of cuobjdump -sass listings (with their hex words) to the table
  scripts/sass-classes.py --check CUBIN LISTING.sass
      decodes CUBIN and compares every kernel with its cuobjdump listing, opcode by opcode
"""
import collections
import json
import os
import re
import signal
import struct
import sys

TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'sass-opcodes.json')
LISTING_LINE = re.compile(r'/\*([0-9a-f]{4,})\*/\s+(.*?);\s*/\* 0x([0-9a-f]{16}) \*/')


def load_table():
    if not os.path.exists(TABLE):
        return {}
    return {int(k, 16): v for k, v in json.load(open(TABLE)).items()}


def listing(path):
    """{kernel name: [(opcode bits, mnemonic)]} of a cuobjdump -sass listing."""
    kernels, name = {}, None
    for line in open(path):
        if 'Function :' in line:
            name = line.split('Function :', 1)[1].strip()
            kernels[name] = []
            continue
        m = LISTING_LINE.search(line)
        if m and name is not None:
            text = re.sub(r'^@!?U?P\w+\s+', '', m.group(2).strip())
            kernels[name].append((int(m.group(3), 16) & 0xfff, text.split()[0].split('.')[0]))
    return kernels


def text_sections(path):
    """{kernel name: code bytes} from the ELF section headers (.text.<name>)."""
    b = open(path, 'rb').read()
    if b[:4] != b'\x7fELF' or b[4] != 2:
        sys.exit(f'{path}: not a 64-bit ELF cubin')
    shoff, = struct.unpack_from('<Q', b, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', b, 0x3A)
    headers = [struct.unpack_from('<IIQQQQIIQQ', b, shoff + i * shentsize) for i in range(shnum)]
    strtab = headers[shstrndx][4]

    def name(offset):
        start = strtab + offset
        return b[start:b.index(b'\0', start)].decode()
    return {name(h[0])[6:]: b[h[4]:h[4] + h[5]] for h in headers if name(h[0]).startswith('.text.')}


def decode(code, table):
    """[(address, mnemonic, branch target or None)] of one kernel's code."""
    out = []
    for at in range(0, len(code) - 15, 16):
        word, = struct.unpack_from('<Q', code, at)
        op = table.get(word & 0xfff, '?%03X' % (word & 0xfff))
        target = None
        if op == 'BRA':  # offset / 4: bits 16..23, then a signed field from bit 34; from the next
            high = word >> 34
            if high & (1 << 29):
                high -= 1 << 30
            target = at + 16 + 4 * (((word >> 16) & 0xff) | (high << 8))
        out.append((at, op, target))
    return out


def loops(ins):
    """Bodies of the backward branches, innermost first among those holding as many HMMAs."""
    index = {at: i for i, (at, _, _) in enumerate(ins)}
    found = []
    for i, (at, op, target) in enumerate(ins):
        if op == 'BRA' and target is not None and target < at and target in index:
            body = ins[index[target]:i + 1]
            found.append((-sum(o == 'HMMA' for _, o, _ in body), len(body), body))
    return [body for _, _, body in sorted(found, key=lambda x: x[:2])]


def report(path, part, mix):
    table = load_table()
    for name, code in sorted(text_sections(path).items()):
        if part not in name:
            continue
        ins = decode(code, table)
        count = collections.Counter(op for _, op, _ in ins)
        print(f'{name}\n  {len(ins)} instructions, STL {count["STL"]}, LDL {count["LDL"]}, '
              f'HMMA {count["HMMA"]}, unknown {sum(v for k, v in count.items() if k[0] == "?")}')
        for rank, body in enumerate(loops(ins)[:3]):
            c = collections.Counter(op for _, op, _ in body)
            print(f'  loop {body[0][0]:#x}..{body[-1][0]:#x}: {len(body)} instructions, '
                  f'HMMA {c["HMMA"]}, STL {c["STL"]}, LDL {c["LDL"]}')
            if mix and rank == 0:
                print('   ', ', '.join(f'{k} {v}' for k, v in c.most_common()))


def learn(paths):
    table = load_table()
    for path in paths:
        for ops in listing(path).values():
            for bits, op in ops:
                if table.get(bits, op) != op:
                    sys.exit(f'{path}: opcode bits {bits:#05x} are both {table[bits]} and {op}')
                table[bits] = op
    with open(TABLE, 'w') as f:
        json.dump({f'{k:03x}': v for k, v in sorted(table.items())}, f, indent=0, sort_keys=True)
        f.write('\n')
    print(f'{TABLE}: {len(table)} opcodes')


def check(cubin, path):
    table, code = load_table(), text_sections(cubin)
    compared = differing = 0
    for name, ops in listing(path).items():
        if name not in code:
            continue
        compared += 1
        mine = [op for _, op, _ in decode(code[name], table)]
        if mine != [op for _, op in ops]:
            differing += 1
            print(f'differs: {name} ({len(mine)} against {len(ops)} instructions)')
    print(f'{compared} kernels compared, {differing} differing')
    return differing == 0 and compared > 0


def main(argv):
    if len(argv) >= 2 and argv[0] == '--learn':
        learn(argv[1:])
    elif len(argv) == 3 and argv[0] == '--check':
        sys.exit(0 if check(argv[1], argv[2]) else 1)
    elif argv and not argv[0].startswith('--'):
        mix = '--mix' in argv
        rest = [a for a in argv if a != '--mix']
        report(rest[0], rest[1] if len(rest) > 1 else '', mix)
    else:
        sys.exit(__doc__)


if __name__ == '__main__':
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under head
    main(sys.argv[1:])
