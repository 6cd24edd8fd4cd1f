#!/usr/bin/env bash
# The example job's throughput at P = 1, 2 and 4 processes, one kernel thread each, on a
# batch where attention dominates (4 prompts of 8000, 6000, 4000 and 2000 tokens through a
# small model), P alternating within each repetition so that every P sees the same load.
# Builds infer against a `meson install --destdir` of BUILDDIR (default ./build):
# examples/batch_job/build_against.sh. One JSON line per run to bench/results/infer/infer.jsonl
# (seconds: the slowest rank's; tokens/s from them), and a summary on stdout. The machine is
# shared: each line also records the CPU seconds that processes other than the job's ranks
# used while it ran (busy time from /proc/stat minus the ranks' own), so a disturbed run
# can be told from a slow one; each run starts after a quiet second (up to 30 s of waiting).
# The summary gives each P's median over the repetitions.
#   examples/batch_job/run.sh [BUILDDIR] [REPS]   (default build, 3)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath "${1:-build}")
reps=${2:-3}
command="examples/batch_job/run.sh $*"
PY=/usr/bin/python3
out=bench/results/infer/infer.jsonl
work=$(mktemp -d)
pids=()
cleanup() {
  ((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

infer_exe=$(examples/batch_job/build_against.sh "$build" "$work")
$PY tools/make_prompts.py --lengths 8000,6000,4000,2000 --vocab 256 --seed 3 --out "$work/prompts.jsonl"
args=(--prompts "$work/prompts.jsonl" --vocab 256 --dim 64 --layers 4 --heads 8 --kv-heads 2 --head-dim 64
  --ffn 128 --tokens 17 --threads 1)

busy() {  # CPU jiffies spent busy since boot, all CPUs (user, nice, system, irq, softirq, steal)
  local cpu user nice system idle iowait irq softirq steal rest
  read -r cpu user nice system idle iowait irq softirq steal rest </proc/stat
  echo $((user + nice + system + irq + softirq + steal))
}

quiet() {  # waits (up to 30 s) for a second in which other processes use under 0.1 CPU s
  local t before
  for ((t = 0; t < 30; t++)); do
    before=$(busy)
    sleep 1
    (($(busy) - before < $(getconf CLK_TCK) / 10)) && return 0
  done
  echo "run.sh: the machine stayed busy for 30 s; running anyway" >&2
}

run() {  # run P REP: P processes through a rendezvous; one aggregated line appended to $out
  local world=$1 rep=$2 r port load
  port=$($PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  load=$(cut -d' ' -f1 /proc/loadavg)
  rm -f "$work"/rank-*
  quiet
  busy0=$(busy)
  pids=()
  for ((r = 0; r < world; r++)); do
    RINGATTN_MASTER=127.0.0.1:$port RINGATTN_TOKEN=infer-bench-token-0123456789 RINGATTN_RANK=$r \
      RINGATTN_WORLD_SIZE=$world RINGATTN_MAX_ROWS=32768 timeout 300 "$infer_exe" "${args[@]}" \
      >"$work/rank-$r.json" 2>"$work/rank-$r.err" &
    pids+=($!)
  done
  local rc=0 pid
  for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  pids=()
  ((rc == 0)) || { tail -n 5 "$work"/rank-*.err; return 1; }
  local busy_seconds
  busy_seconds=$($PY -c "print(($(busy) - $busy0) / $(getconf CLK_TCK))")
  cat "$work"/rank-*.json | $PY -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
world, rep, load, cpu, command = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
others = float(sys.argv[6]) - sum(r["cpu_seconds"] for r in rows)
r0 = rows[0]
prefill = max(r["prefill_seconds"] for r in rows)
decode = max(r["decode_seconds"] for r in rows)
decoded = r0["prompts"] * r0["decode_steps"]
print(json.dumps({"bench": "infer", "nodes": world, "threads": 1, "rep": rep, "prompts": r0["prompts"],
    "prompt_tokens": r0["prompt_tokens"], "layers": r0["layers"], "dim": r0["dim"], "heads": r0["heads"],
    "kv_heads": r0["kv_heads"], "head_dim": r0["head_dim"], "ffn": r0["ffn"],
    "prefill_seconds": prefill, "prefill_attention_seconds_max": max(r["prefill_attention_seconds"] for r in rows),
    "prefill_tokens_per_s": round(r0["prompt_tokens"] / prefill, 1),
    "decode_steps": r0["decode_steps"], "decode_seconds": decode, "decode_tokens_per_s": round(decoded / decode, 1),
    "ranks_cpu_seconds": round(sum(r["cpu_seconds"] for r in rows), 3), "others_cpu_seconds": round(others, 3),
    "load_before": load, "cpu": cpu, "command": command}))
' "$world" "$rep" "$load" "$(lscpu | sed -n 's/^Model name: *//p') (family $(lscpu | sed -n 's/^CPU family: *//p'), $(nproc) vCPUs)" \
    "$command" "$busy_seconds" >>"$out"
}

mkdir -p "${out%/*}"
: >"$out"
for ((rep = 0; rep < reps; rep++)); do
  for world in 1 2 4; do run "$world" "$rep"; done
done
$PY - "$out" <<'EOF2'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
base = {r["rep"]: r["prefill_tokens_per_s"] for r in rows if r["nodes"] == 1}
for r in rows:
    print(f"P={r['nodes']} rep {r['rep']}: prefill {r['prefill_tokens_per_s']:.0f} tok/s "
          f"({r['prefill_tokens_per_s'] / base[r['rep']]:.2f}x P=1), decode {r['decode_tokens_per_s']:.0f} tok/s, "
          f"others used {r['others_cpu_seconds']:.2f} CPU s")
for world in sorted({r["nodes"] for r in rows}):
    mine = [r for r in rows if r["nodes"] == world]
    calm = [r for r in mine if r["others_cpu_seconds"] < 0.5]
    median = lambda key: sorted(r[key] for r in mine)[len(mine) // 2]
    speedup = sorted(r["prefill_tokens_per_s"] / base[r["rep"]] for r in mine)[len(mine) // 2]
    print(f"P={world} median: prefill {median('prefill_tokens_per_s'):.0f} tok/s ({speedup:.2f}x P=1 of the same rep), "
          f"decode {median('decode_tokens_per_s'):.0f} tok/s; best: prefill "
          f"{max(r['prefill_tokens_per_s'] for r in mine):.0f}, decode {max(r['decode_tokens_per_s'] for r in mine):.0f}; "
          f"undisturbed (others < 0.5 CPU s): {len(calm)} runs"
          + (f", median prefill {sorted(r['prefill_tokens_per_s'] for r in calm)[len(calm) // 2]:.0f}, "
             f"decode {sorted(r['decode_tokens_per_s'] for r in calm)[len(calm) // 2]:.0f}" if calm else ""))
EOF2
