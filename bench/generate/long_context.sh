#!/usr/bin/env bash
# ringattn generate on a long prompt with seeded weights of a realistic attention shape
# (32 query / 8 KV heads of 128, model width 512, MLP 1024, LAYERS layers): prefill tokens/s,
# time to first token, decode tokens/s at P = 1 and P = 2 (one kernel thread per rank), and
# each run's peak RSS (the largest of its processes, from /usr/bin/time) against the shard
# model: this rank's K/V cache (rows x 8 x 128 x 2 x 4 bytes per layer) plus the weights.
# Decode's latency per token at P = 2 against the same run's decode kernel (the slowest
# rank's, over its cache shard) plus the ring's round trips: those measured by a second
# P = 2 run of the same shape on a 256-token prompt, whose decode calls are all ring.
#
#   bench/generate/long_context.sh [TOKENS] [LAYERS] [OUT]   (default 16384, 1, bench/results/generate/long-context.jsonl)
#   NODES="2" bench/generate/long_context.sh ...             (only P = 2: the decode target without P = 1's prefill)
set -euo pipefail
cd "$(dirname "$0")/../.."
tokens=${1:-16384} layers=${2:-1} out=${3:-bench/results/generate/long-context.jsonl}
mkdir -p "$(dirname "$out")"
cpu=$(lscpu | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2; exit}')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: > "$tmp/out.jsonl"
generate() {  # generate P TOKENS: one run's JSON to $tmp/run.json, its peak RSS to $tmp/rss
  /usr/bin/time -f '%M' -o "$tmp/rss" build/ringattn generate --model seed:1 --vocab 512 --dim 512 --layers "$layers" \
    --heads 32 --kv-heads 8 --head-dim 128 --ffn 1024 --random-prompt "$2" --max-tokens 16 --nodes "$1" --threads 1 \
    --max-rows $(($2 + 1)) --json > "$tmp/run.json"
}
echo "long context: the ring's round trips, P = 2 on a 256-token prompt ($cpu)" >&2
generate 2 256
cp "$tmp/run.json" "$tmp/short.json"
for p in ${NODES:-1 2}; do
  echo "long context: $tokens tokens, $layers layers, P = $p ($cpu)" >&2
  generate "$p" "$tokens"
  /usr/bin/python3 - "$tmp/run.json" "$(cat "$tmp/rss")" "$p" "$cpu" "$tokens" "$layers" "$tmp/short.json" >> "$tmp/out.jsonl" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
rss_kib, p, cpu, tokens, layers = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
short = json.load(open(sys.argv[7]))
steps = max(j["decode_steps"], 1)
# The ring's part of a decode step: a short context's attention time less its kernel time.
ring = (short["decode_attention_seconds"] - short["decode_kernel_seconds"]) / max(short["decode_steps"], 1)
kernel = j["decode_kernel_seconds"] / steps
rows = max(r["rows"] for r in j["ranks"])
cache = rows * 8 * 128 * 2 * 4 * layers
print(json.dumps({"bench": "generate_long_context", "cpu": cpu, "nodes": p, "prompt_tokens": j["prompt_tokens"], "layers": layers,
                  "prefill_seconds": j["prefill_seconds"], "prefill_tokens_per_s": j["prefill_tokens_per_s"],
                  "prefill_attention_seconds": j["prefill_attention_seconds"],
                  "time_to_first_token_seconds": j["time_to_first_token_seconds"],
                  "decode_seconds_per_token": j["decode_seconds"] / max(j["decode_steps"], 1),
                  "decode_attention_seconds_per_token": j["decode_attention_seconds"] / max(j["decode_steps"], 1),
                  "decode_kernel_seconds_per_token": kernel, "ring_round_trips_seconds_per_token": ring,
                  "decode_over_kernel_plus_round_trips": j["decode_seconds"] / steps / (kernel + ring),
                  "decode_tokens_per_s": j["decode_tokens_per_s"], "max_rank_rows": rows,
                  "peak_rss_bytes_largest_process": rss_kib * 1024, "kv_cache_bytes_per_rank": cache,
                  "command": "bench/generate/long_context.sh %d %d" % (tokens, layers)}))
PY
done
/usr/bin/python3 - "$tmp/out.jsonl" <<'PY'
import json, sys
rows = {r["nodes"]: r for r in map(json.loads, open(sys.argv[1]))}
if 1 in rows and 2 in rows:
    one, two = rows[1], rows[2]
    print("prefill tokens/s P2/P1: %.2f (target >= 1.8); decode s/token P1 %.4f, P2 %.4f; peak RSS P1 %.0f MiB, P2 %.0f MiB (largest process)" % (
        two["prefill_tokens_per_s"] / one["prefill_tokens_per_s"], one["decode_seconds_per_token"], two["decode_seconds_per_token"],
        one["peak_rss_bytes_largest_process"] / 2**20, two["peak_rss_bytes_largest_process"] / 2**20), file=sys.stderr)
if 2 in rows:
    two = rows[2]
    print("decode at P 2: %.4f s/token = %.2f x (kernel %.4f + ring round trips %.5f) (target <= 1.3)" % (
        two["decode_seconds_per_token"], two["decode_over_kernel_plus_round_trips"], two["decode_kernel_seconds_per_token"],
        two["ring_round_trips_seconds_per_token"]), file=sys.stderr)
PY
mv "$tmp/out.jsonl" "$out"
