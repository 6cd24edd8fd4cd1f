#!/usr/bin/env bash
# Builds the example job (examples/batch_job/, on infer/) out of tree against a `meson install --destdir` of BUILDDIR,
# as a user of the installed library would (release, ringattn.pc): WORK/dest holds the
# install, WORK/infer the build. Prints the path of the infer program. Used by the benches
# (examples/batch_job/run.sh, examples/batch_job/tp_bench.sh); deploy/test_embedding.sh does the same with its checks.
#   examples/batch_job/build_against.sh BUILDDIR WORK
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath "$1") work=$2
read -r prefix libdir < <(meson introspect "$build" --buildoptions | /usr/bin/python3 -c '
import json, sys
o = {x["name"]: x["value"] for x in json.load(sys.stdin)}
print(o["prefix"], o["libdir"])')
lib=$work/dest$prefix/$libdir
meson install -C "$build" --destdir "$work/dest" --quiet >/dev/null
PKG_CONFIG_SYSROOT_DIR=$work/dest meson setup "$work/infer" examples/batch_job --pkg-config-path "$lib/pkgconfig" \
  --buildtype=release >/dev/null
ninja -C "$work/infer" >/dev/null
echo "$work/infer/infer"
