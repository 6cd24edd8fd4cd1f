#!/usr/bin/env python3
"""The floors gate fails on a bypass, both where it is checked and where it is built.

  floors_gate.py SOURCE_ROOT BUILD_DIR

1. check_floors.py on a small tree of its own: a program that reaches a private header of
   the library by <ring/x.hpp>, by "ring/x.hpp" and by "../../ring/x.hpp" is refused, each
   line named; the same program on the public headers passes. A room of the model runtime
   that includes a room above it (infer/common/ reaching infer/job/, infer/model/ reaching
   infer/tokenizers/) is refused, each line named, and so is a source outside the rooms.
2. The build's own flags: the compile command of a real program (src/main.cpp, from
   compile_commands.json) compiles a file that includes <ringattn/ring.hpp>, and does not
   compile one that includes <ring/ring_step.hpp> or "ring/ring_step.hpp" — the tree's root
   is not on a program's include path.
"""
import json
import os
import shlex
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def refuses(tree, named, failures, what):
    """check_floors.py on `tree` exits 1 naming each of `named`; else a failure about `what`."""
    r = subprocess.run([sys.executable, os.path.join(here, "check_floors.py"), tree], capture_output=True, text=True)
    if r.returncode != 1:
        failures.append("check_floors.py passed %s (exit %d): %s" % (what, r.returncode, r.stdout))
    for line in named:
        if line not in r.stdout:
            failures.append("check_floors.py did not name '%s': %s" % (line, r.stdout))
    return r.stdout


def main():
    root, build = sys.argv[1], sys.argv[2]
    failures = []
    with tempfile.TemporaryDirectory(prefix="ringattn-floors-") as t:
        write(os.path.join(t, "ring", "x.hpp"), "#pragma once\n")
        write(os.path.join(t, "include", "ringattn", "api.hpp"), "#pragma once\n")
        bypass = '#include <ring/x.hpp>\n#include "ring/x.hpp"\n#include "../../ring/x.hpp"\n'
        write(os.path.join(t, "src", "tool", "main.cpp"), bypass + '#include "ringattn/api.hpp"\n')
        out = refuses(t, ("src/tool/main.cpp:1: #include <ring/x.hpp>", 'src/tool/main.cpp:2: #include "ring/x.hpp"',
                          'src/tool/main.cpp:3: #include "../../ring/x.hpp"'), failures, "a bypass")
        if "main.cpp:4" in out:
            failures.append("check_floors.py refused the public header: " + out)
        write(os.path.join(t, "src", "tool", "main.cpp"), '#include "ringattn/api.hpp"\n#include <vector>\n')
        r = subprocess.run([sys.executable, os.path.join(here, "check_floors.py"), t], capture_output=True, text=True)
        if r.returncode != 0:
            failures.append("check_floors.py refused a clean program: " + r.stdout)
        # The runtime's rooms: up is refused, down passes.
        write(os.path.join(t, "infer", "job", "load.hpp"), '#pragma once\n#include "../common/json.hpp"\n')
        write(os.path.join(t, "infer", "tokenizers", "bpe.hpp"), '#pragma once\n#include "../formats/gguf.hpp"\n')
        write(os.path.join(t, "infer", "formats", "gguf.hpp"), '#pragma once\n#include "../common/json.hpp"\n')
        write(os.path.join(t, "infer", "common", "json.hpp"), '#pragma once\n#include "../job/load.hpp"\n')
        write(os.path.join(t, "infer", "model", "model.hpp"), '#pragma once\n#include "infer/tokenizers/bpe.hpp"\n')
        write(os.path.join(t, "infer", "loose.cpp"), '#include "common/json.hpp"\n')
        out = refuses(t, ('infer/common/json.hpp:2: #include "../job/load.hpp"',
                          'infer/model/model.hpp:2: #include "infer/tokenizers/bpe.hpp"', "infer/loose.cpp"), failures,
                      "a room bypass")
        for line in ("infer/job/load.hpp:", "infer/tokenizers/bpe.hpp:", "infer/formats/gguf.hpp:"):
            if line in out:
                failures.append("check_floors.py refused a room's include of a room below it (%s): %s" % (line, out))

        with open(os.path.join(build, "compile_commands.json")) as f:
            commands = json.load(f)
        main_cc = [c for c in commands if os.path.normpath(os.path.join(c["directory"], c["file"])) ==
                   os.path.normpath(os.path.join(root, "src", "main.cpp"))]
        if not main_cc:
            failures.append("no compile command for src/main.cpp in %s/compile_commands.json" % build)
        else:
            c = main_cc[0]
            args = shlex.split(c["command"]) if "command" in c else list(c["arguments"])
            # The same compiler and flags, on a file of ours, checking syntax only.
            flags = []
            skip = False
            for a in args[1:]:
                if skip:
                    skip = False
                    continue
                if a in ("-o", "-MF", "-MQ", "-MT", "-c"):
                    skip = a != "-c"
                    continue
                if a.endswith("main.cpp") or a.startswith("-MD"):
                    continue
                flags.append(a)
            for name, text, want in (("public", "#include <ringattn/ring.hpp>\n", True),
                                     ("angle", "#include <ring/ring_step.hpp>\n", False),
                                     ("quoted", '#include "ring/ring_step.hpp"\n', False)):
                src = os.path.join(t, "gate_%s.cpp" % name)
                write(src, text + "int main() { return 0; }\n")
                r = subprocess.run([args[0]] + flags + ["-fsyntax-only", src], cwd=c["directory"], capture_output=True, text=True)
                if (r.returncode == 0) != want:
                    failures.append("a program's own flags %s %s: %s" % ("did not compile" if want else "compiled", text.strip(),
                                                                         r.stderr[-400:]))
    for f in failures:
        print("FAILED: " + f)
    print("floors_gate: %d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
