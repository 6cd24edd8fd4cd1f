#!/usr/bin/env bash
# ringattn generate on a long prompt with seeded weights of a realistic attention shape
# (32 query / 8 KV heads of 128, model width 512, MLP 1024, LAYERS layers): prefill tokens/s,
# time to first token, decode tokens/s at P = 1 and P = 2 (one kernel thread per rank), and
# each run's peak RSS (the largest of its processes, from /usr/bin/time) against the shard
# model: this rank's K/V cache (rows x 8 x 128 x 2 x 4 bytes per layer) plus the weights.
#
#   bench/generate/long_context.sh [TOKENS] [LAYERS] [OUT]   (default 16384, 1, bench/results/generate/long-context.jsonl)
set -euo pipefail
cd "$(dirname "$0")/../.."
tokens=${1:-16384} layers=${2:-1} out=${3:-bench/results/generate/long-context.jsonl}
mkdir -p "$(dirname "$out")"
cpu=$(lscpu | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2; exit}')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: > "$tmp/out.jsonl"
for p in 1 2; do
  echo "long context: $tokens tokens, $layers layers, P = $p ($cpu)" >&2
  /usr/bin/time -f '%M' -o "$tmp/rss" build/ringattn generate --model seed:1 --vocab 512 --dim 512 --layers "$layers" \
    --heads 32 --kv-heads 8 --head-dim 128 --ffn 1024 --random-prompt "$tokens" --max-tokens 16 --nodes "$p" --threads 1 \
    --max-rows $((tokens + 1)) --json > "$tmp/run.json"
  /usr/bin/python3 - "$tmp/run.json" "$(cat "$tmp/rss")" "$p" "$cpu" "$tokens" "$layers" >> "$tmp/out.jsonl" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
rss_kib, p, cpu, tokens, layers = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
rows = max(r["rows"] for r in j["ranks"])
cache = rows * 8 * 128 * 2 * 4 * layers
print(json.dumps({"bench": "generate_long_context", "cpu": cpu, "nodes": p, "prompt_tokens": j["prompt_tokens"], "layers": layers,
                  "prefill_seconds": j["prefill_seconds"], "prefill_tokens_per_s": j["prefill_tokens_per_s"],
                  "prefill_attention_seconds": j["prefill_attention_seconds"],
                  "time_to_first_token_seconds": j["time_to_first_token_seconds"],
                  "decode_seconds_per_token": j["decode_seconds"] / max(j["decode_steps"], 1),
                  "decode_attention_seconds_per_token": j["decode_attention_seconds"] / max(j["decode_steps"], 1),
                  "decode_tokens_per_s": j["decode_tokens_per_s"], "max_rank_rows": rows,
                  "peak_rss_bytes_largest_process": rss_kib * 1024, "kv_cache_bytes_per_rank": cache,
                  "command": "bench/generate/long_context.sh %d %d" % (tokens, layers)}))
PY
done
/usr/bin/python3 - "$tmp/out.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
one, two = rows[0], rows[1]
print("prefill tokens/s P2/P1: %.2f (target >= 1.8); decode s/token P1 %.4f, P2 %.4f; peak RSS P1 %.0f MiB, P2 %.0f MiB (largest process)" % (
    two["prefill_tokens_per_s"] / one["prefill_tokens_per_s"], one["decode_seconds_per_token"], two["decode_seconds_per_token"],
    one["peak_rss_bytes_largest_process"] / 2**20, two["peak_rss_bytes_largest_process"] / 2**20), file=sys.stderr)
PY
mv "$tmp/out.jsonl" "$out"
