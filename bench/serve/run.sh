#!/usr/bin/env bash
# The daemons' benchmark (issue targets): jobs through `ringattn submit` against the
# ring's own compute time and against `ringattn bench ring`, measured in the same run on
# this machine. P = 2 daemons on loopback, one kernel thread each (as bench ring's nodes).
#
#   bench/serve/run.sh [OUT_DIR]      (default bench/results/serve)
#
#   small  P=2, N=2048, H=8, KV=8, D=128, fp32: 11 submits (first is warm-up), median
#          end-to-end latency vs ring_seconds + (Q+K+V+O bytes) / (iperf3 on loopback).
#          Target: latency <= 1.3x that.
#   large  P=2, N=65536, H=8, KV=2, D=128, bf16, causal: one submit; useful GFLOP/s of the
#          whole submit vs `ringattn bench ring` of the same shape. Target: >= 0.9x.
# Writes OUT_DIR/serve.jsonl (one object per measurement) and prints a summary table.
set -euo pipefail
cd "$(dirname "$0")/../.."
RA=$PWD/build/ringattn
OUT=${1:-bench/results/serve}
mkdir -p "$OUT"
work=$(mktemp -d)
export RINGATTN_LOCAL_RING=$work/ring
cleanup() { deploy/local-ring.sh stop >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
cpu=$(lscpu | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2; exit}')
echo "bench serve: $cpu, $(nproc) vCPUs" >&2

# The client's link: iperf3 over loopback, as the ring benchmarks use it.
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
sleep 0.3
link_bps=$(iperf3 -c 127.0.0.1 -p "$port" -t 3 -J | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 8)')
echo "bench serve: iperf3 loopback $(/usr/bin/python3 -c "print(f'{$link_bps/1e9:.2f}')") GB/s" >&2

gen() {  # gen DIR N KV DTYPE_ROUND
  /usr/bin/python3 - "$@" <<'PY'
import sys, numpy as np
d, n, kv = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = np.random.default_rng(0)
for name, h in (("q", 8), ("k", kv), ("v", kv)):
    np.save(f"{d}/{name}.npy", r.standard_normal((n, h, 128), dtype=np.float32))
PY
}

deploy/local-ring.sh start 2 >/dev/null
source "$RINGATTN_LOCAL_RING/ring.env"
export RINGATTN_TOKEN_FILE

mkdir -p "$work/small"
gen "$work/small" 2048 8
: >"$OUT/serve.jsonl"
for i in $(seq 0 10); do
  "$RA" submit --to "$RING_CONTROL" --q "$work/small/q.npy" --k "$work/small/k.npy" --v "$work/small/v.npy" \
    --out "$work/small/o.npy" --json >"$work/small/r$i.json"
  [[ $i -gt 0 ]] && /usr/bin/python3 -c "
import json; r = json.load(open('$work/small/r$i.json')); r['case'] = 'small'; r['cpu'] = '''$cpu'''; r['link_bytes_per_second'] = $link_bps
print(json.dumps(r))" >>"$OUT/serve.jsonl"
done

mkdir -p "$work/large"
gen "$work/large" 65536 2
echo "bench serve: large job through submit (N 65536, bf16, causal)..." >&2
"$RA" submit --to "$RING_CONTROL" --q "$work/large/q.npy" --k "$work/large/k.npy" --v "$work/large/v.npy" \
  --out "$work/large/o.npy" --dtype bf16 --causal --json >"$work/large/r.json"
/usr/bin/python3 -c "
import json; r = json.load(open('$work/large/r.json')); r['case'] = 'large'; r['cpu'] = '''$cpu'''
print(json.dumps(r))" >>"$OUT/serve.jsonl"
deploy/local-ring.sh stop >/dev/null
echo "bench serve: bench ring on the same shape..." >&2
"$RA" bench ring --nodes 2 --seq 65536 --heads 8 --kv-heads 2 --head-dim 128 --dtype bf16 --mask causal \
  --reps 1 --no-baseline --quiet | /usr/bin/python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line); r['case'] = 'bench_ring'; r['cpu'] = '''$cpu'''; print(json.dumps(r))" >>"$OUT/serve.jsonl"

/usr/bin/python3 - "$OUT/serve.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
small = [r for r in rows if r["case"] == "small"]
large = next(r for r in rows if r["case"] == "large")
ring = next(r for r in rows if r["case"] == "bench_ring")
B = small[0]["link_bytes_per_second"]
moved = 4 * 2048 * 8 * 128 * 4  # Q, K, V and O, fp32
lat = statistics.median(r["total_seconds"] for r in small)
ring_s = statistics.median(r["ring_seconds"] for r in small)
bound = ring_s + moved / B
flops = sum(n["useful_flops"] for n in large["nodes"])
g_submit = flops / large["total_seconds"] / 1e9
g_job = flops / large["job_seconds"] / 1e9
g_ring = ring["gflops"]
print(f"cpu: {small[0]['cpu']}")
print(f"small job: median latency {lat*1e3:.1f} ms; ring {ring_s*1e3:.1f} ms + moving {moved/2**20:.0f} MiB at "
      f"{B/1e9:.2f} GB/s {moved/B*1e3:.1f} ms = {bound*1e3:.1f} ms; ratio {lat/bound:.2f} (target <= 1.3)")
print(f"large job: {g_submit:.1f} GFLOP/s useful end to end ({g_job:.1f} counting the job on the daemons only); "
      f"bench ring {g_ring} GFLOP/s; ratio {g_submit/g_ring if g_ring else float('nan'):.2f} (target >= 0.9)")
PY
