#!/usr/bin/env bash
# The official OpenAI Node client (npm `openai`, the version pinned here) against a running
# endpoint, for tests/serve/test_openai_client.cpp:
#
#   run.sh install                          puts openai@VERSION in the cache unless it is there
#   run.sh test BASE_URL KEY MODEL METRICS_URL EXPECTED
#                                           runs client_test.mjs; prints its JSON report
#
# The package never enters the repository: it is installed into $RINGATTN_NODE_CACHE, by
# default /var/cache/ringattn-test/openai-node (~/.cache/ringattn-test/openai-node where
# /var/cache is not writable). Exit 77 (meson's skip) when node or npm is missing or npm
# cannot install (no registry); the caller decides whether a skip is allowed.
set -euo pipefail
version=4.104.0
here=$(cd "$(dirname "$0")" && pwd)
cache=${RINGATTN_NODE_CACHE:-/var/cache/ringattn-test/openai-node}
if ! mkdir -p "$(dirname "$cache")" 2>/dev/null || [[ ! -w "$(dirname "$cache")" ]]; then
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/ringattn-test/openai-node
  mkdir -p "$(dirname "$cache")"
fi

installed() {
  [[ "$(node -p "require('$cache/node_modules/openai/package.json').version" 2>/dev/null)" == "$version" ]]
}

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "run.sh: node and npm are needed (deploy/setup.sh installs them)" >&2
  exit 77
fi

case "${1:-}" in
  install)
    installed && exit 0
    exec 9>"$cache.lock"
    flock 9  # one install at a time; the second finds the first's
    installed && exit 0
    tmp=$(mktemp -d "$cache.XXXXXX")
    if ! npm install --prefix "$tmp" --no-audit --no-fund --fetch-retries=1 --fetch-timeout=30000 "openai@$version" >"$tmp.log" 2>&1; then
      echo "run.sh: npm could not install openai@$version (no registry?): $(tail -n 3 "$tmp.log")" >&2
      rm -rf "$tmp" "$tmp.log"
      exit 77
    fi
    chmod 755 "$tmp"  # mktemp's 0700 would keep other users' test runs out
    rm -rf "$cache"
    mv "$tmp" "$cache"  # whole or not at all: a half install is never found
    rm -f "$tmp.log"
    ;;
  test)
    shift
    installed || { echo "run.sh: openai@$version is not in $cache: run.sh install first" >&2; exit 77; }
    exec node "$here/client_test.mjs" "$cache" "$@"
    ;;
  *)
    echo "usage: run.sh install | run.sh test BASE_URL KEY MODEL METRICS_URL EXPECTED" >&2
    exit 2
    ;;
esac
