#!/usr/bin/env python3
"""The floors of docs/design.md, checked from the include lines of the tree:

    core/ -> kernels/, net/ (never each other) -> ring/ -> programs (infer/, src/, bench/, python/,
    examples/)

and inside the model runtime, infer/, its rooms (infer/README.md):

    common/ -> formats/ -> tokenizers/;  common/ -> chat_templates/;  formats/ -> model/;
    all of them -> job/ -> constrain/

Programs include only the public headers (include/ringattn/) and their own files; the
library never includes a program. Both include forms are read, "..." and <...>, and each is
resolved as the compiler resolves it — a quoted path against the including file's folder
first, then the include path of that file's layer (programs: include/ only; the library and
the tests: include/ and the root) — so neither <ring/ring_step.hpp> nor
"../../ring/ring_step.hpp" gets a program past the gate. A path that resolves nowhere (a
system header) is judged as written, from the root, so a bypass through some other -I flag
is caught too.

Usage: check_floors.py [SOURCE_ROOT]   (exit 1 listing every include that breaks a rule)
"""
import os
import re
import sys

PROGRAMS = {"infer", "src", "bench", "python", "examples"}
PRIVATE = {"core", "kernels", "net", "ring"}
LIBRARY = PRIVATE | {"include"}
RULES = [  # (what is forbidden, layers it applies to, layers they may not include)
    ("a program includes a private header of the library (use include/ringattn/ only)", PROGRAMS, PRIVATE),
    ("the library includes a program", LIBRARY, PROGRAMS | {"tests"}),
    ("the model runtime (infer/) includes a program above it", {"infer"}, {"src", "bench", "python", "tests", "examples"}),
    ("kernels/ includes net/ or ring/", {"kernels"}, {"net", "ring"}),
    ("net/ includes kernels/ or ring/", {"net"}, {"kernels", "ring"}),
    ("core/ includes a floor above it", {"core"}, {"kernels", "net", "ring"}),
    ("a public header includes a private one", {"include"}, PRIVATE),
]
# infer/'s rooms: what each may include of the others (itself always).
ROOMS = {
    "common": set(),
    "formats": {"common"},
    "tokenizers": {"common", "formats"},
    "chat_templates": {"common"},
    "model": {"common", "formats"},
    "job": {"common", "formats", "tokenizers", "chat_templates", "model"},
    "constrain": {"common", "job"},
}
ROOM_RULE = "a room of the model runtime includes one it may not (infer/README.md: its floors)"
LOOSE_RULE = "a source of the model runtime outside its rooms (infer/<room>/)"
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def layer_of(path):
    """The top folder of a path relative to the root, or None outside the tree."""
    if path.startswith(".." + os.sep) or path == ".." or os.path.isabs(path):
        return None
    return path.split(os.sep)[0]


def room_of(path):
    """infer/<room>/... -> room; None elsewhere."""
    parts = path.split(os.sep) if path else []
    return parts[1] if len(parts) > 2 and parts[0] == "infer" else None


def resolve(root, source, form, written):
    """The path (relative to root) an include reaches from `source`, as the compiler finds it."""
    layer = layer_of(source)
    roots = ["include"] if layer in PROGRAMS else ["include", "."]
    candidates = [os.path.join(os.path.dirname(source), written)] if form == '"' else []
    candidates += [os.path.join(r, written) for r in roots]
    for c in candidates:
        c = os.path.normpath(c)
        if os.path.isfile(os.path.join(root, c)):
            return c
    return os.path.normpath(written)  # resolves nowhere here: as written, from the root


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    broken = {what: [] for what, _, _ in RULES}
    broken[ROOM_RULE] = []
    broken[LOOSE_RULE] = []
    for top in sorted(PROGRAMS | LIBRARY):
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".cpp", ".hpp", ".h")):
                    continue
                source = os.path.relpath(os.path.join(folder, name), root)
                room = room_of(source)
                if layer_of(source) == "infer" and room not in ROOMS:
                    broken[LOOSE_RULE].append(source)
                with open(os.path.join(root, source), errors="replace") as f:
                    text = f.read()
                for m in INCLUDE.finditer(text):
                    path = resolve(root, source, m.group(1), m.group(2))
                    reached = layer_of(path)
                    line = text.count("\n", 0, m.start()) + 1
                    for what, sources, forbidden in RULES:
                        if layer_of(source) in sources and reached in forbidden:
                            broken[what].append("%s:%d: %s" % (source, line, m.group(0).strip()))
                    into = room_of(path)
                    if room in ROOMS and into is not None and into != room and into not in ROOMS[room]:
                        broken[ROOM_RULE].append("%s:%d: %s (%s/ may include %s)" % (
                            source, line, m.group(0).strip(), room, ", ".join(sorted(ROOMS[room])) or "none of the others"))
    bad = False
    for what, hits in broken.items():
        if hits:
            bad = True
            print("floors: %s:" % what)
            for h in hits:
                print("  " + h)
    if not bad:
        print("floors: programs on the public API only; no include runs back up a floor (both include forms); "
              "infer/'s rooms include only the rooms below them")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
