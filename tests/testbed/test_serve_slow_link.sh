#!/usr/bin/env bash
# The daemons on a shaped link: three `ringattn serve` in a network namespace of their
# own whose loopback is a 200 Mbit/s tc tbf (every ring link, the scatter of shards and
# the client's upload go through the shaper); a job completes and equals a
# single-process run of the same inputs. (The netns ring testbed of deploy/netns/ links
# only ring neighbours; the daemons also need rank 0 to reach every rank.)
#   test_serve_slow_link.sh RINGATTN
# Exit 77 (skipped) without root or network namespaces.
set -uo pipefail
RA=$1
if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  echo "skipped: needs root, ip and tc"
  exit 77
fi
ns="raslow$$"
if ! ip netns add "$ns" 2>/dev/null; then
  echo "skipped: cannot create network namespaces here"
  exit 77
fi
work=$(mktemp -d)
cleanup() {
  ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
  sleep 0.2
  ip netns del "$ns" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
in_ns() { ip netns exec "$ns" "$@"; }
in_ns ip link set lo up mtu 1500  # tbf needs packets smaller than its burst
in_ns tc qdisc add dev lo root tbf rate 200mbit burst 64kb latency 200ms

head -c 24 /dev/urandom | base64 >"$work/token"
chmod 600 "$work/token"
/usr/bin/python3 - "$work" <<'PY'
import sys, numpy as np
r = np.random.default_rng(5)
for n, h in (("q", 8), ("k", 2), ("v", 2)):
    np.save(f"{sys.argv[1]}/{n}.npy", r.standard_normal((3000, h, 64), dtype=np.float32))
PY
for r in 0 1 2; do
  in_ns "$RA" serve --rank "$r" --world-size 3 --master 127.0.0.1:7600 --listen 127.0.0.1 --control "127.0.0.1:780$r" \
    --metrics off --token-file "$work/token" --threads 1 --timeout 20 --log-level warn 2>>"$work/daemon$r.log" &
done
export RINGATTN_TOKEN_FILE=$work/token
if ! in_ns "$RA" status --to 127.0.0.1:7800 --wait 60 >/dev/null ||
   ! in_ns "$RA" submit --to 127.0.0.1:7801 --q "$work/q.npy" --k "$work/k.npy" --v "$work/v.npy" \
       --out "$work/o.npy" --causal --json >"$work/submit.json"; then
  echo "FAIL: the job on the shaped link did not complete"
  for r in 0 1 2; do tail -n 5 "$work/daemon$r.log"; done
  exit 1
fi
sent=$(in_ns tc -s qdisc show dev lo | awk '/Sent/ {print $2; exit}')
"$RA" run --nodes 1 --q "$work/q.npy" --k "$work/k.npy" --v "$work/v.npy" --out "$work/ref.npy" --causal --quiet >/dev/null 2>&1
/usr/bin/python3 - "$work" "$sent" <<'PY'
import json, sys, numpy as np
w, sent = sys.argv[1], int(sys.argv[2])
err = float(np.abs(np.load(f"{w}/o.npy") - np.load(f"{w}/ref.npy")).max())
s = json.load(open(f"{w}/submit.json"))
print(f"job through a 200 Mbit/s shaper ({sent / 1e6:.1f} MB shaped): {s['total_seconds']:.2f} s, "
      f"max |O - single process| = {err:.2e}")
ok = err <= 2e-5 and sent > 1e6
print("ok: exact on the shaped link" if ok else "FAIL: result differs or nothing went through the shaper")
sys.exit(0 if ok else 1)
PY
