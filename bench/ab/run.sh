#!/usr/bin/env bash
# A/B of two ringattn builds on the same machine: the forward ring's time and decode's step
# latency, the two binaries alternating (A B B A ...) so a drift of the machine's speed
# falls on both. Writes every run's JSON line, tagged, to OUT.jsonl and prints the medians
# and B/A ratios (bench/ab/summary.py).
#
#   bash bench/ab/run.sh A_BINARY B_BINARY OUT [ROUNDS [CONFIG_REGEX]]
#
# A is the baseline (e.g. the previous main built in a worktree), B the candidate.
set -euo pipefail
a=$1 b=$2 out=$3 rounds=${4:-3} only=${5:-.}
here=$(cd "$(dirname "$0")" && pwd)
: > "$out.jsonl"
configs=(
  "ring-fp32-causal|bench ring --nodes 2 --layout zigzag --mask causal --seq 16384 --heads 8 --kv-heads 8 --dtype fp32 --threads 1 --reps 3 --no-baseline"
  "ring-bf16-none-small|bench ring --nodes 2 --layout zigzag --mask none --seq 4096 --heads 8 --kv-heads 2 --dtype bf16 --threads 1 --reps 5 --no-baseline"
  "decode-bf16-4k|bench decode --nodes 2 --context 4096 --heads 32 --kv-heads 8 --dtype bf16 --steps 40"
  "decode-bf16-64k|bench decode --nodes 2 --context 65536 --heads 32 --kv-heads 8 --dtype bf16 --steps 20"
)
run() {  # side binary config-name args...
  local side=$1 bin=$2 name=$3; shift 3
  echo "ab: $name $side ($(date +%T))" >&2
  # shellcheck disable=SC2086
  "$bin" $* 2>/dev/null | grep '^{' | sed "s/^{/{\"ab_side\":\"$side\",\"ab_config\":\"$name\",/" >> "$out.jsonl"
}
for ((i = 0; i < rounds; i++)); do
  for c in "${configs[@]}"; do
    name=${c%%|*} args=${c#*|}
    [[ $name =~ $only ]] || continue
    if ((i % 2 == 0)); then run A "$a" "$name" $args; run B "$b" "$name" $args
    else run B "$b" "$name" $args; run A "$a" "$name" $args; fi
  done
done
python3 "$here/summary.py" "$out.jsonl" | tee "$out.md"
