#!/usr/bin/env bash
# The official OpenAI Node client (npm `openai`, the version pinned here) against a running
# endpoint, for tests/serve/test_openai_client.cpp:
#
#   run.sh install                          puts openai@VERSION in the cache unless it is there
#   run.sh test BASE_URL KEY MODEL METRICS_URL EXPECTED
#                                           runs client_test.mjs; prints its JSON report
#   run.sh tools BASE_URL KEY MODEL TOOLS   runs tools_test.mjs (tool calls; TOOLS the JSON of the
#                                           requests' "tools"); prints its JSON report
#
# The package never enters the repository: it is installed into $RINGATTN_NODE_CACHE, by
# default /var/cache/ringattn-test/openai-node (~/.cache/ringattn-test/openai-node where
# /var/cache is not writable). Exit 77 (meson's skip) when node or npm is missing or npm
# cannot install (no registry); the caller decides whether a skip is allowed.
set -euo pipefail
version=4.104.0
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/npm_cache.sh
source "$here/../../npm_cache.sh"
cache=$(test_cache_dir openai-node "${RINGATTN_NODE_CACHE:-}")

installed() {
  [[ "$(node -p "require('$cache/node_modules/openai/package.json').version" 2>/dev/null)" == "$version" ]]
}

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "run.sh: node and npm are needed (deploy/setup.sh installs them)" >&2
  exit 77
fi

case "${1:-}" in
  install)
    npm_cache_install "$cache" installed "openai@$version" "openai@$version"
    ;;
  test)
    shift
    installed || { echo "run.sh: openai@$version is not in $cache: run.sh install first" >&2; exit 77; }
    exec node "$here/client_test.mjs" "$cache" "$@"
    ;;
  tools)
    shift
    installed || { echo "run.sh: openai@$version is not in $cache: run.sh install first" >&2; exit 77; }
    exec node "$here/tools_test.mjs" "$cache" "$@"
    ;;
  *)
    echo "usage: run.sh install | run.sh test BASE_URL KEY MODEL METRICS_URL EXPECTED | run.sh tools BASE_URL KEY MODEL TOOLS" >&2
    exit 2
    ;;
esac
