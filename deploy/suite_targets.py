#!/usr/bin/env python3
"""The ninja targets the tests of some suites need: each test's own program and what it
depends on (the ringattn program the daemons' tests spawn, say), as meson introspect tells.
deploy/test.sh builds only these in the sanitizer tree (its slowest step), not the
benchmarks and the binaries of suites it does not run there.

  suite_targets.py BUILDDIR SUITE...   (prints one target path per line, relative to BUILDDIR)
"""
import json
import os
import subprocess
import sys


def main():
    build, suites = sys.argv[1], set(sys.argv[2:])
    def introspect(what):
        return json.loads(subprocess.check_output(["meson", "introspect", build, what]))
    targets = {t["id"]: t for t in introspect("--targets")}
    by_file = {f: t for t in targets.values() for f in t["filename"]}
    want = set()
    for test in introspect("--tests"):
        if not suites & {s.split(":")[-1] for s in test["suite"]}:
            continue
        ids = list(test["depends"])
        if test["cmd"] and test["cmd"][0] in by_file:
            ids.append(by_file[test["cmd"][0]]["id"])
        for i in ids:
            for f in targets[i]["filename"]:
                want.add(os.path.relpath(f, os.path.abspath(build)))
    for f in sorted(want):
        print(f)
    return 0 if want else 1


if __name__ == "__main__":
    sys.exit(main())
