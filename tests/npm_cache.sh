# shellcheck shell=bash
# Sourced by the test set-ups that install npm packages outside the tree (the oracles:
# tests/serve/openai_node/run.sh, tests/model/tokenizers_node/run.sh). Packages never enter
# the repository.
#
#   test_cache_dir NAME [DIR]     the cache for NAME: DIR if given, else /var/cache/ringattn-test/NAME;
#                                 under ~/.cache/ringattn-test where that parent is not writable
#   npm_cache_install CACHE CHECK WHAT PACKAGE@VERSION... [NPM OPTION...]
#                                 unless the function CHECK succeeds, installs into CACHE whole or
#                                 not at all (a temporary prefix moved into place), one install at
#                                 a time (flock); exits 77, meson's skip, when npm cannot (no registry)

test_cache_dir() {
  local dir=${2:-/var/cache/ringattn-test/$1}
  if ! mkdir -p "$(dirname "$dir")" 2>/dev/null || [[ ! -w "$(dirname "$dir")" ]]; then
    dir=${XDG_CACHE_HOME:-$HOME/.cache}/ringattn-test/$1
    mkdir -p "$(dirname "$dir")"
  fi
  echo "$dir"
}

npm_cache_install() {
  local cache=$1 check=$2 what=$3 tmp
  shift 3
  "$check" && return 0
  exec 9>"$cache.lock"
  flock 9  # one install at a time; the second finds the first's
  "$check" && return 0
  tmp=$(mktemp -d "$cache.XXXXXX")
  if ! npm install --prefix "$tmp" --no-audit --no-fund --fetch-retries=1 --fetch-timeout=30000 "$@" >"$tmp.log" 2>&1; then
    echo "run.sh: npm could not install $what (no registry?): $(tail -n 3 "$tmp.log")" >&2
    rm -rf "$tmp" "$tmp.log"
    exit 77
  fi
  chmod 755 "$tmp"  # mktemp's 0700 would keep other users' test runs out
  rm -rf "$cache"
  mv "$tmp" "$cache"
  rm -f "$tmp.log"
}
