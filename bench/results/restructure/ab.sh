#!/bin/bash
# The restructuring's A/B (issue 17): the tree before it (OLD, a build of a7ff75f) and
# after it (NEW), alternating (old first in odd rounds, new first in even ones), ROUNDS
# rounds each, same machine, same run.
#   bash bench/results/restructure/ab.sh OLD_EXE NEW_EXE OUT_DIR [ROUNDS]
#   (BENCHES="api decode" to run only some of ring, api, decode)
set -euo pipefail
old=$1 new=$2 out=$3 rounds=${4:-2}
mkdir -p "$out"
run() {  # run NAME EXE ARGS...
  local name=$1 exe=$2; shift 2
  echo "$(date +%T) $name: $exe $*" >&2
  "$exe" "$@" --quiet | sed "s/^{/{\"build\":\"$name\",/" >> "$out/$bench.jsonl"
}
for r in $(seq "$rounds"); do
  for bench in ${BENCHES:-ring api decode}; do
    case $bench in
      ring) args=(bench ring --nodes 2 --layout zigzag --mask none,causal --seq 16384 --heads 8 --kv-heads 8
                  --head-dim 128 --dtype fp32,bf16 --threads 1 --reps 3 --no-baseline) ;;
      api) args=(bench api --calls 200 --layers 32) ;;
      decode) args=(bench decode --nodes 2 --context 262144 --steps 10) ;;
    esac
    # ABBA: the second run of a pair was ~5 % slower whichever build it was (bench decode,
    # rerun-ef60dc4/), so the order alternates by round and the medians cancel it.
    if ((r % 2)); then
      run old "$old" "${args[@]}"
      run new "$new" "${args[@]}"
    else
      run new "$new" "${args[@]}"
      run old "$old" "${args[@]}"
    fi
  done
done
