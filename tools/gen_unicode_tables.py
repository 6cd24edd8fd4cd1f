#!/usr/bin/env python3
"""Writes infer/common/unicode_tables.hpp and infer/common/unicode_tables.cpp, the data behind infer/common/unicode.cpp.

Two sources, on purpose:
- The character classes \\p{L}, \\p{N} and \\s are JavaScript's, because the tokenizer's
  oracle is transformers.js on Node: node tests every code point (surrogates skipped)
  against /\\p{L}/u, /\\p{N}/u and /\\s/u, so the ranges are V8's (its ICU's Unicode), not
  Python's (whose str.isspace() differs from \\s, e.g. on U+0085 and U+FEFF).
- NFC (single-step canonical decompositions, combining classes, primary composites) is
  Python's unicodedata. A composite is primary unless it is a full composition exclusion,
  derived as unicodedata.normalize('NFC', its decomposition) != itself (this catches the
  script-specific and post-composition-version exclusions and the non-starter
  decompositions; singletons never form a pair).
It also checks the claim unicode.cpp's nfc() fast path rests on: a string of code points
below U+0300 is its own NFC.

  python3 tools/gen_unicode_tables.py [--out infer/common]

stdlib only (and the node on PATH). The output is a function of the two Unicode versions
alone, which it names at the top of both files.
"""
import argparse
import json
import os
import subprocess
import sys
import unicodedata

MAX_CP = 0x10FFFF
FAST_PATH_LIMIT = 0x300  # nfc()'s fast path: every code point below this is left alone

# Prints {"node": ..., "unicode": ..., "icu": ..., "letter": [[first, last], ...], "number": ..., "space": ...}.
NODE_SCRIPT = r"""
const classes = {letter: /^\p{L}$/u, number: /^\p{N}$/u, space: /^\s$/u};
const out = {node: process.version, unicode: process.versions.unicode, icu: process.versions.icu};
for (const [name, re] of Object.entries(classes)) {
  const ranges = [];
  for (let cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    if (!re.test(String.fromCodePoint(cp))) continue;
    const last = ranges[ranges.length - 1];
    if (last && last[1] === cp - 1) last[1] = cp; else ranges.push([cp, cp]);
  }
  out[name] = ranges;
}
process.stdout.write(JSON.stringify(out));
"""


def js_classes():
    try:
        done = subprocess.run(['node', '-e', NODE_SCRIPT], check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f'gen_unicode_tables.py: running node for the JavaScript classes failed: {e}')
    return json.loads(done.stdout)


def require(ok, what):
    """A check that holds under python3 -O too (assert would not)."""
    if not ok:
        sys.exit(f'gen_unicode_tables.py: {what}')


def is_hangul_syllable(cp):
    return 0xAC00 <= cp <= 0xD7A3


def canonical_decompositions():
    """cp -> tuple of 1 or 2 code points, one step as UnicodeData.txt has it (no Hangul)."""
    out = {}
    for cp in range(MAX_CP + 1):
        if 0xD800 <= cp <= 0xDFFF or is_hangul_syllable(cp):
            continue
        d = unicodedata.decomposition(chr(cp))
        if not d or d.startswith('<'):
            continue  # none, or a compatibility mapping (NFKC's, not NFC's)
        parts = tuple(int(x, 16) for x in d.split())
        require(len(parts) in (1, 2), f'U+{cp:04X}: canonical decomposition of {len(parts)} code points')
        out[cp] = parts
    return out


def combining_ranges():
    """[first, last, ccc] for the runs of equal nonzero canonical combining class."""
    ranges = []
    for cp in range(MAX_CP + 1):
        ccc = 0 if 0xD800 <= cp <= 0xDFFF else unicodedata.combining(chr(cp))
        if ccc == 0:
            continue
        if ranges and ranges[-1][1] == cp - 1 and ranges[-1][2] == ccc:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp, ccc])
    return ranges


def composition_pairs(decomp):
    """[(first, second, composite)] for every primary composite, sorted by (first, second)."""
    pairs = []
    for cp, parts in decomp.items():
        if len(parts) != 2:
            continue
        if unicodedata.normalize('NFC', ''.join(map(chr, parts))) != chr(cp):
            continue  # a full composition exclusion: NFC never produces it
        pairs.append((parts[0], parts[1], cp))
    pairs.sort()
    keys = [(a, b) for a, b, _ in pairs]
    require(len(set(keys)) == len(keys), 'two composites share one (first, second) pair')
    return pairs


def check_fast_path(pairs):
    """Below U+0300 nothing combines (ccc 0), nothing is excluded from NFC (e.g. U+00C0 does
    decompose, but NFC recomposes it), and no pair of two such code points composes: so a
    string of them is already NFC."""
    for cp in range(FAST_PATH_LIMIT):
        c = chr(cp)
        require(unicodedata.combining(c) == 0, f'U+{cp:04X} has a nonzero combining class')
        require(unicodedata.normalize('NFC', c) == c, f'U+{cp:04X} is not its own NFC')
        require(unicodedata.is_normalized('NFC', c), f'U+{cp:04X} is not NFC')
    for a, b, _ in pairs:
        require(b >= FAST_PATH_LIMIT, f'U+{a:04X} U+{b:04X} compose below U+{FAST_PATH_LIMIT:04X}')


def rows(items, per_line):
    """C++ initialiser lines, `per_line` items a line."""
    lines = []
    for i in range(0, len(items), per_line):
        lines.append('    ' + ' '.join(items[i:i + per_line]))
    return '\n'.join(lines)


def array(name, type_name, items, per_line):
    return (f'constexpr {type_name} {name}[] = {{\n{rows(items, per_line)}\n}};\n')


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--out', default=os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'infer', 'common'))
    args = ap.parse_args()

    js = js_classes()
    decomp = canonical_decompositions()
    ccc = combining_ranges()
    pairs = composition_pairs(decomp)
    check_fast_path(pairs)

    banner = (
        '// GENERATED by tools/gen_unicode_tables.py; do not edit. Regenerate with\n'
        '//   python3 tools/gen_unicode_tables.py\n'
        f'// Letter/number/space: JavaScript\'s /\\p{{L}}/u, /\\p{{N}}/u, /\\s/u on node {js["node"]}'
        f' (Unicode {js["unicode"]}, ICU {js["icu"]}).\n'
        f'// NFC data: Python {sys.version.split()[0]} unicodedata (Unicode {unicodedata.unidata_version}).\n')

    hpp = banner + '''// The sorted tables infer/common/unicode.cpp binary-searches (see unicode.hpp for what they mean).
#pragma once

#include <cstdint>
#include <span>

namespace infer::unicode::tables {

struct Range {  // [first, last], inclusive
  char32_t first, last;
};
struct ClassRange {  // [first, last] all have canonical combining class `ccc` (never 0)
  char32_t first, last;
  std::uint8_t ccc;
};
struct Decomposition {  // one step of UnicodeData.txt's canonical mapping; second 0 if a singleton
  char32_t from, first, second;
};
struct Composition {  // first + second -> composite, for every primary composite
  char32_t first, second, composite;
};

extern const std::span<const Range> kLetter;
extern const std::span<const Range> kNumber;
extern const std::span<const Range> kSpace;
extern const std::span<const ClassRange> kCombiningClass;   // sorted by first
extern const std::span<const Decomposition> kDecomposition; // sorted by from; no Hangul syllables
extern const std::span<const Composition> kComposition;     // sorted by (first, second)

}  // namespace infer::unicode::tables
'''

    def rng(r):
        return f'{{0x{r[0]:X},0x{r[1]:X}}},'

    body = [
        array('letter', 'Range', [rng(r) for r in js['letter']], 6),
        array('number', 'Range', [rng(r) for r in js['number']], 6),
        array('space', 'Range', [rng(r) for r in js['space']], 6),
        array('combining_class', 'ClassRange', [f'{{0x{a:X},0x{b:X},{c}}},' for a, b, c in ccc], 5),
        array('decomposition', 'Decomposition',
              [f'{{0x{cp:X},0x{p[0]:X},0x{p[1] if len(p) == 2 else 0:X}}},' for cp, p in sorted(decomp.items())], 5),
        array('composition', 'Composition', [f'{{0x{a:X},0x{b:X},0x{c:X}}},' for a, b, c in pairs], 5),
    ]
    cpp = banner + '#include "unicode_tables.hpp"\n\nnamespace infer::unicode::tables {\nnamespace {\n\n' + \
        '\n'.join(body) + '''
}  // namespace

constinit const std::span<const Range> kLetter{letter};
constinit const std::span<const Range> kNumber{number};
constinit const std::span<const Range> kSpace{space};
constinit const std::span<const ClassRange> kCombiningClass{combining_class};
constinit const std::span<const Decomposition> kDecomposition{decomposition};
constinit const std::span<const Composition> kComposition{composition};

}  // namespace infer::unicode::tables
'''
    for name, text in (('unicode_tables.hpp', hpp), ('unicode_tables.cpp', cpp)):
        with open(os.path.join(args.out, name), 'w', encoding='ascii', newline='\n') as f:
            f.write(text)
    print(f'letter {len(js["letter"])} ranges, number {len(js["number"])}, space {len(js["space"])}, '
          f'combining classes {len(ccc)}, decompositions {len(decomp)}, compositions {len(pairs)}')


if __name__ == '__main__':
    main()
