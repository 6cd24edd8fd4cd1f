#!/usr/bin/env bash
# An independent JSON Schema validator (npm `ajv`, the version pinned here) for the constrained
# decoding tests (tests/constrain/test_walks.cpp):
#
#   run.sh install             puts ajv@VERSION in the cache unless it is there
#   run.sh validate CASES.json REPORT.json
#                              runs validate.mjs: every output of every case parsed with
#                              JSON.parse and checked against the case's schema (draft 2020-12;
#                              "schema": null is json_object mode: any object); writes the report
#
# The package never enters the repository: it is installed into $RINGATTN_AJV_CACHE, by default
# /var/cache/ringattn-test/ajv (~/.cache/ringattn-test/ajv where /var/cache is not writable).
# Exit 77 (meson's skip) when node or npm is missing or npm cannot install (no registry); the
# caller decides whether a skip is allowed.
set -euo pipefail
version=8.20.0
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/npm_cache.sh
source "$here/../../npm_cache.sh"
cache=$(test_cache_dir ajv "${RINGATTN_AJV_CACHE:-}")

installed() {
  [[ "$(node -p "require('$cache/node_modules/ajv/package.json').version" 2>/dev/null)" == "$version" ]]
}

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "run.sh: node and npm are needed (deploy/setup.sh installs them)" >&2
  exit 77
fi

case "${1:-}" in
  install)
    npm_cache_install "$cache" installed "ajv@$version" "ajv@$version"
    ;;
  validate)
    [[ $# -eq 3 ]] || { echo "usage: run.sh validate CASES.json REPORT.json" >&2; exit 2; }
    installed || { echo "run.sh: ajv@$version is not in $cache: run.sh install first" >&2; exit 77; }
    exec node "$here/validate.mjs" "$cache" "$2" "$3"
    ;;
  *)
    echo "usage: run.sh install | run.sh validate CASES.json REPORT.json" >&2
    exit 2
    ;;
esac
