#!/usr/bin/env bash
# Tensor parallelism against one rank, on seeded weights of Llama-3.2-1B's shape (vocab
# 128256, dim 2048, 16 layers, 32 / 8 heads of 64, MLP 8192; fp32 matrices: 4.9 GB): the
# example job (examples/batch_job/) on one 256-token prompt, 16 tokens, in three configurations run in
# turn each repetition —
#   tp1   one rank, 2 kernel threads              (the whole model in one process)
#   tp2   2 ranks, --tp 2, 1 thread each          (each holds half of every layer)
#   ring2 2 ranks, the ring, 1 thread each        (each holds the whole model, half the rows)
# Each line of bench/results/tp/tp.jsonl: the weight bytes and peak RSS of the largest rank,
# prefill and decode seconds of the slowest, tokens/s. Then the logits: tp2's and ring2's
# tokens equal tp1's and every logit within 1e-5 of its row's largest |logit|
# (tools/compare.py --relative) — a bench run that disagrees fails. Summary: medians.
#   examples/batch_job/tp_bench.sh [BUILDDIR] [REPS]   (default build, 2)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath "${1:-build}")
reps=${2:-2}
PY=/usr/bin/python3
out=bench/results/tp/tp.jsonl
work=$(mktemp -d)
pids=()
cleanup() {
  ((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cpu="$(lscpu | sed -n 's/^Model name: *//p') (family $(lscpu | sed -n 's/^CPU family: *//p') model $(lscpu | sed -n 's/^Model: *//p'), $(nproc) vCPUs, $(grep -q avx512f /proc/cpuinfo && echo AVX-512 || echo AVX2))"

echo "tp bench: building infer against an install of $build" >&2
infer_exe=$(examples/batch_job/build_against.sh "$build" "$work")
$PY tools/make_prompts.py --lengths 256 --vocab 128256 --seed 5 --out "$work/prompts.jsonl"
model=(--vocab 128256 --dim 2048 --layers 16 --heads 32 --kv-heads 8 --head-dim 64 --ffn 8192 --tokens 16)

run() {  # run NAME WORLD THREADS REP [infer options...]: one line appended to $out, logits in $work/NAME-REP
  local name=$1 world=$2 threads=$3 rep=$4 r port
  shift 4
  port=$($PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  echo "tp bench: $name, rep $((rep + 1)) of $reps ($cpu)" >&2
  pids=()
  for ((r = 0; r < world; r++)); do
    RINGATTN_MASTER=127.0.0.1:$port RINGATTN_TOKEN=tp-bench-token-0123456789abcdef RINGATTN_RANK=$r \
      RINGATTN_WORLD_SIZE=$world /usr/bin/time -f '%M' -o "$work/rss-$r" timeout 900 "$infer_exe" \
      --prompts "$work/prompts.jsonl" "${model[@]}" --threads "$threads" --out "$work/$name-$rep" "$@" \
      >"$work/rank-$r.json" 2>"$work/rank-$r.err" &
    pids+=($!)
  done
  local rc=0 pid
  for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  pids=()
  ((rc == 0)) || { tail -n 5 "$work"/rank-*.err >&2; return 1; }
  local rss=0 x
  for ((r = 0; r < world; r++)); do x=$(tail -n 1 "$work/rss-$r"); ((x > rss)) && rss=$x; done
  cat "$work"/rank-*.json | $PY -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
name, rep, rss_kib, cpu = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
r0 = rows[0]
prefill = max(r["prefill_seconds"] for r in rows)
decode = max(r["decode_seconds"] for r in rows)
print(json.dumps({"bench": "tp", "config": name, "rep": rep, "world": r0["world"], "tp": r0["tp"],
    "threads": r0["threads"], "prompt_tokens": r0["prompt_tokens"], "weight_bytes": max(r["weight_bytes"] for r in rows),
    "peak_rss_bytes": rss_kib * 1024, "prefill_seconds": prefill, "prefill_tokens_per_s": r0["prompt_tokens"] / prefill,
    "decode_steps": r0["decode_steps"], "decode_ms_per_step": 1000 * decode / max(r0["decode_steps"], 1),
    "isa": r0["isa"], "cpu": cpu}))
' "$name" "$rep" "$rss" "$cpu" >>"$out"
}

mkdir -p "${out%/*}"
: >"$out"
for ((rep = 0; rep < reps; rep++)); do
  run tp1 1 2 "$rep"
  run tp2 2 1 "$rep" --tp 2
  run ring2 2 1 "$rep"
done
for name in tp2 ring2; do
  echo "tp bench: $name's tokens and logits against tp1's (1e-5 of each row's largest |logit|)" >&2
  $PY tools/compare.py "$work/tp1-0" "$work/$name-0" --tol 1e-5 --relative
done
$PY - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda xs: sorted(xs)[len(xs) // 2]
base = {k: med([r[k] for r in rows if r["config"] == "tp1"]) for k in ("weight_bytes", "prefill_tokens_per_s", "decode_ms_per_step")}
print(f"{'config':6} {'weights/rank':>13} {'peak RSS':>9} {'prefill tok/s':>14} {'decode ms/step':>15}   ({rows[0]['cpu']})")
for name in ("tp1", "tp2", "ring2"):
    mine = [r for r in rows if r["config"] == name]
    w, rss = med([r["weight_bytes"] for r in mine]), med([r["peak_rss_bytes"] for r in mine])
    p, d = med([r["prefill_tokens_per_s"] for r in mine]), med([r["decode_ms_per_step"] for r in mine])
    print(f"{name:6} {w / 1e9:9.2f} GB ({w / base['weight_bytes']:.2f}x) {rss / 1e9:6.2f} GB "
          f"{p:8.1f} ({p / base['prefill_tokens_per_s']:.2f}x) {d:8.1f} ({d / base['decode_ms_per_step']:.2f}x)")
PY
