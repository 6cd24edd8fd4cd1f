#!/usr/bin/env bash
# Consecutive rounds of the multi-process suites under load, to find flakes before CI does:
# each round runs the serve and integration meson suites two tests at a time, then
# deploy/test_embedding.sh, all beside a one-core CPU burner (on 2 vCPUs: three processes
# contend for two cores). Stops at the first red round, keeps its log, and says which.
#   deploy/soak.sh [ROUNDS (10)] [BUILDDIR (build)]
# Writes soak.csv (round,part,rc,seconds) and soak-round-N.log in SOAK_DIR (default
# BUILDDIR/soak); prints one line per part and "soak: N of ROUNDS rounds green".
# The build tree must be built (ninja -C BUILDDIR) and the model tests' files present as for
# deploy/test.sh; it changes nothing in the tree but SOAK_DIR.
set -uo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-10}
dir=${2:-build}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "soak: ROUNDS must be a positive integer, got '$rounds'" >&2; exit 2; }
[[ -f $dir/build.ninja ]] || { echo "soak: $dir is not a configured build tree (meson setup $dir; ninja -C $dir)" >&2; exit 2; }
out=${SOAK_DIR:-$dir/soak}
mkdir -p "$out"
csv=$out/soak.csv
echo "round,part,rc,seconds" > "$csv"

burner=
stop_burner() { [[ -n $burner ]] && kill "$burner" 2>/dev/null; wait "$burner" 2>/dev/null; burner=; }
trap 'stop_burner' EXIT
trap 'echo "soak: stopped by a signal in round ${round:-0}"; exit 130' INT TERM
( while :; do :; done ) &
burner=$!

part() {  # part ROUND NAME LOG CMD...
  local r=$1 name=$2 log=$3
  shift 3
  local start=$SECONDS rc=0
  echo "== round $r: $name" >> "$log"
  "$@" >> "$log" 2>&1 || rc=$?
  local took=$((SECONDS - start))
  echo "$r,$name,$rc,$took" >> "$csv"
  printf 'round %d/%d %-11s %s (%d s)\n' "$r" "$rounds" "$name" "$([[ $rc == 0 ]] && echo ok || echo "FAILED rc=$rc")" "$took"
  return $rc
}

green=0
for ((round = 1; round <= rounds; round++)); do
  log=$out/soak-round-$round.log
  : > "$log"
  part "$round" meson "$log" meson test -C "$dir" --print-errorlogs --num-processes 2 \
    --suite serve --suite integration &&
    part "$round" embedding "$log" deploy/test_embedding.sh "$dir" || {
    echo "soak: round $round red; its log: $log"
    grep -E "^[ 0-9/]+ .*(FAIL|TIMEOUT)|FAILED|^embedding: " "$log" | head -20
    break
  }
  green=$((green + 1))
  rm -f "$log"
done
echo "soak: $green of $rounds rounds green ($csv)"
[[ $green == "$rounds" ]]
