#!/usr/bin/env bash
# A rack on one machine: P `ringattn serve` daemons on loopback, as an operator would run
# one per server (docs/daemons.md).
#
#   deploy/local-ring.sh demo [P]     install + build, start P daemons (default 3), submit a
#                                     job, check it against a single-process run, show
#                                     `ringattn status` and /metrics, stop the daemons
#   deploy/local-ring.sh start [P]    start P daemons and wait until the ring is ready
#   deploy/local-ring.sh status       ringattn status of the running ring
#   deploy/local-ring.sh stop         SIGTERM every daemon (they drain) and wait for them
#
# State lives in $RINGATTN_LOCAL_RING (default /tmp/ringattn-local-ring): the token (0600),
# ring.env (RING_CONTROL=host:port of rank 0, RING_METRICS=..., RINGATTN_TOKEN_FILE=...),
# each daemon's pid and log. Ports are free ones picked at start; only 127.0.0.1 is used.
set -euo pipefail
cd "$(dirname "$0")/.."
RA=${RINGATTN_EXE:-$PWD/build/ringattn}
DIR=${RINGATTN_LOCAL_RING:-/tmp/ringattn-local-ring}

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start() {
  local P=${1:-3}
  if [[ -f $DIR/ring.env ]] && stop_quietly_needed; then
    echo "local-ring: a ring is already running (deploy/local-ring.sh stop first)" >&2
    exit 1
  fi
  mkdir -p "$DIR"
  rm -f "$DIR"/*.pid "$DIR"/*.log
  umask 077
  head -c 32 /dev/urandom | base64 >"$DIR/token"
  local master
  master=$(free_port)
  local controls=() metrics=()
  for ((r = 0; r < P; r++)); do
    controls+=("$(free_port)")
    metrics+=("$(free_port)")
  done
  for ((r = 0; r < P; r++)); do
    "$RA" serve --rank "$r" --world-size "$P" --master "127.0.0.1:$master" --listen 127.0.0.1 \
      --control "127.0.0.1:${controls[$r]}" --metrics "127.0.0.1:${metrics[$r]}" \
      --token-file "$DIR/token" --threads 1 ${RINGATTN_SERVE_ARGS:-} >"$DIR/rank$r.log" 2>&1 &
    echo $! >"$DIR/rank$r.pid"
  done
  {
    echo "RING_CONTROL=127.0.0.1:${controls[0]}"
    echo "RING_METRICS=127.0.0.1:${metrics[0]}"
    echo "RINGATTN_TOKEN_FILE=$DIR/token"
  } >"$DIR/ring.env"
  echo "local-ring: started $P daemons (logs in $DIR); waiting for the ring"
  RINGATTN_TOKEN_FILE=$DIR/token "$RA" status --to "127.0.0.1:${controls[0]}" --wait 60
}

stop_quietly_needed() {
  for f in "$DIR"/*.pid; do
    [[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null && return 0
  done
  return 1
}

stop() {
  local pids=()
  for f in "$DIR"/*.pid; do
    [[ -f $f ]] || continue
    pids+=("$(cat "$f")")
    rm -f "$f"
  done
  ((${#pids[@]})) || { echo "local-ring: no daemons running"; return 0; }
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 100); do
    kill -0 "${pids[@]}" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "${pids[@]}" 2>/dev/null || true
  rm -f "$DIR/ring.env"
  echo "local-ring: stopped ${#pids[@]} daemons"
}

status() {
  [[ -f $DIR/ring.env ]] || { echo "local-ring: not running" >&2; exit 1; }
  # shellcheck disable=SC1091
  source "$DIR/ring.env"
  RINGATTN_TOKEN_FILE=$RINGATTN_TOKEN_FILE "$RA" status --to "$RING_CONTROL"
}

demo() {
  local P=${1:-3}
  deploy/setup.sh
  trap stop EXIT
  start "$P"
  # shellcheck disable=SC1091
  source "$DIR/ring.env"
  export RINGATTN_TOKEN_FILE
  local work
  work=$(mktemp -d)
  /usr/bin/python3 - "$work" <<'PY'
import sys, numpy as np
r = np.random.default_rng(0)
for n, h in (("q", 8), ("k", 2), ("v", 2)):
    np.save(f"{sys.argv[1]}/{n}.npy", r.standard_normal((8192, h, 128), dtype=np.float32))
PY
  echo
  echo "\$ ringattn submit --to $RING_CONTROL --q q.npy --k k.npy --v v.npy --out o.npy --causal"
  "$RA" submit --to "$RING_CONTROL" --q "$work/q.npy" --k "$work/k.npy" --v "$work/v.npy" --out "$work/o.npy" \
    --lse "$work/lse.npy" --causal
  "$RA" run --nodes 1 --q "$work/q.npy" --k "$work/k.npy" --v "$work/v.npy" --out "$work/ref.npy" --causal --quiet \
    >/dev/null 2>&1
  /usr/bin/python3 -c "
import numpy as np, sys
e = float(np.abs(np.load('$work/o.npy') - np.load('$work/ref.npy')).max())
print(f'max |O(ring of daemons) - O(one process)| = {e:.2e}', '(exact)' if e <= 2e-5 else '(NOT exact)')
sys.exit(0 if e <= 2e-5 else 1)"
  echo
  echo "\$ ringattn status --to $RING_CONTROL"
  "$RA" status --to "$RING_CONTROL"
  echo
  echo "\$ curl -s http://$RING_METRICS/metrics | grep -E 'jobs_total|ring_state\\{state=\"ready|bytes_sent|job_seconds_(sum|count)'"
  /usr/bin/python3 -c "
import urllib.request
for line in urllib.request.urlopen('http://$RING_METRICS/metrics').read().decode().splitlines():
    if not line.startswith('#') and any(k in line for k in ('jobs_total{', 'ring_state{state=\"ready\"}', 'bytes_sent_total ', 'job_seconds_sum', 'job_seconds_count')):
        print(line)"
  rm -rf "$work"
  echo
}

case "${1:-demo}" in
  demo) demo "${2:-3}" ;;
  start) start "${2:-3}" ;;
  stop) stop ;;
  status) status ;;
  *) sed -n '2,16p' "$0" >&2; exit 2 ;;
esac
