#!/usr/bin/env bash
# Decode on stationary KV shards, the table in docs/benchmarks.md: P = 4, 2 and 1 ranks (one thread each)
# at 64k, 256k and 1M tokens of context, GQA 32/8, head dim 128, bf16 cache, batch 1; JSON
# lines (one per P and context) appended to bench/results/decode/decode-<name>.jsonl.
#   bash bench/decode/run.sh [NAME]    (default: run<date>)
set -euo pipefail
cd "$(dirname "$0")/../.."
name=${1:-run$(date +%Y%m%d%H%M)}
out=bench/results/decode/decode-$name.jsonl
mkdir -p bench/results/decode
exe=${RINGATTN_EXE:-build/ringattn}
for P in 4 2 1; do
  echo "bench decode: P = $P" >&2
  "$exe" bench decode --nodes "$P" --context 65536,262144,1048576 --steps 10 --quiet >>"$out"
done
echo "bench decode: wrote $out" >&2
