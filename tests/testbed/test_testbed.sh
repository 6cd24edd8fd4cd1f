#!/usr/bin/env bash
# deploy/netns/testbed.sh as CI runs it (root): the namespaces and veths exist while the
# command runs; a 200 Mbit/s tbf link carries the overlap benchmark's blocks within 25 %
# of its rate; and nothing is left afterwards, whether the command succeeds, fails or
# the testbed is stopped by SIGTERM.
#   test_testbed.sh RINGATTN TESTBED [PYDIR]   (PYDIR: the built Python module's directory)
# Exit 77 (skipped) without root or network namespaces.
set -uo pipefail
RA=$1
TESTBED=$2
PYDIR=${3:-}
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }

if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  echo "skipped: needs root, ip and tc"
  exit 77
fi
probe="ratbprobe$$"
if ! ip netns add "$probe" 2>/dev/null; then
  echo "skipped: cannot create network namespaces here"
  exit 77
fi
ip netns del "$probe"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# leftovers ID: namespaces of testbed run ID (ratb<PID>-*) still present
leftovers() { ip netns list | awk '{print $1}' | grep -c "^$1-" || true; }

# 1. Set-up while the command runs, its failure code passed on, tear-down after.
"$TESTBED" --nodes 3 -- bash -c '
  ns0=$(echo "{launch}" | sed "s/.* //; s/{rank}/0/")
  echo "ID=${ns0%-0}"
  [[ $(ip netns list | grep -c "^${ns0%-0}-") -eq 3 ]] || exit 9
  ip -n "$ns0" -br addr show succ | grep -q "10.213.0.1/24" || exit 10
  ip -n "$ns0" -br addr show pred | grep -q "10.213.2.2/24" || exit 11
  [[ "{hosts}" == "10.213.2.2:7700,10.213.0.2:7700,10.213.1.2:7700" ]] || exit 12
  exit 3' >"$work/out1" 2>&1
rc=$?
id=$(sed -n 's/^ID=//p' "$work/out1")
if [[ $rc -eq 3 && -n $id ]]; then ok "3 namespaces with their veth ring; the command's exit code 3 is passed on"
else fail "set-up or exit code (rc $rc, want 3):"; cat "$work/out1"; fi
[[ -n $id && $(leftovers "$id") -eq 0 ]] && ok "namespaces removed after a failing command" ||
  fail "namespaces of $id left after a failing command"

# 2. SIGTERM while a process runs inside a namespace: both end, nothing is left.
"$TESTBED" -- bash -c 'ns=$(echo "{launch}" | sed "s/.* //; s/{rank}/1/"); ip netns exec "$ns" sleep 600' \
  >"$work/out2" 2>&1 &
tb=$!
inner=""
for _ in $(seq 1 100); do
  inner=$(ip netns pids "ratb$tb-1" 2>/dev/null | head -n 1)
  [[ -n $inner ]] && break
  sleep 0.1
done
kill -TERM "$tb"
wait "$tb"
rc=$?
[[ -n $inner ]] || fail "no process ever ran in ratb$tb-1"
[[ $rc -eq 143 ]] && ok "SIGTERM ends the testbed with 143" || { fail "rc $rc after SIGTERM, want 143"; cat "$work/out2"; }
[[ $(leftovers "ratb$tb") -eq 0 ]] && ok "namespaces removed after SIGTERM" || fail "namespaces of ratb$tb left after SIGTERM"
if [[ -n $inner ]] && kill -0 "$inner" 2>/dev/null; then fail "process $inner inside the namespace survived"; else ok "the process inside the namespace was ended"; fi

# 3. --like arithmetic (F given, so nothing is measured) and the not-a-bottleneck warning.
"$TESTBED" --like 1e12:3.1e9 --flops 1e11 -- true >"$work/out3" 2>&1
grep -q "tbf rate 259[0-9]*bit" "$work/out3" && ok "--like 1e12:3.1e9 at F = 1e11 shapes to 2.59 Gbit/s (0.31 GB/s payload)" ||
  { fail "--like rate"; cat "$work/out3"; }
"$TESTBED" --link 25gbit -- true >"$work/out4" 2>&1
grep -q "will not be the bottleneck" "$work/out4" && ok "a 25gbit shaping is reported as not the bottleneck" ||
  { fail "no warning for 25gbit"; cat "$work/out4"; }

# 4. A shaped link, measured by the overlap benchmark (a tiny sweep of three sizes).
start=$SECONDS
"$TESTBED" --link 200mbit -- "$RA" bench overlap --hosts {hosts} --launch {launch} --link {link} \
  --b 128,256,512 --heads 8 --mask none,causal --min-seconds 0.3 --out "$work/ov" >"$work/out5" 2>&1
rc=$?
id=$(sed -n 's/.*namespaces \(ratb[0-9]*\)-0.*/\1/p' "$work/out5" | head -n 1)
if [[ $rc -ne 0 ]]; then fail "shaped sweep failed (rc $rc)"; tail -n 30 "$work/out5"; fi
B=$(grep '"kind":"summary","mask":"none"' "$work/ov/overlap.jsonl" 2>/dev/null | sed -n 's/.*"B_bytes_per_s":\([0-9.e+]*\).*/\1/p')
if [[ -n $B ]] && awk -v b="$B" 'BEGIN { r = b / 25e6; exit !(r >= 0.75 && r <= 1.25) }'; then
  ok "200mbit link measured at $(awk -v b="$B" 'BEGIN { printf "%.1f MB/s = %.0f %% of 25 MB/s", b / 1e6, b / 25e6 * 100 }') ($((SECONDS - start)) s)"
else
  fail "200mbit link measured at '${B:-nothing}' B/s, not within 25 % of 25e6"
fi
for f in overlap.csv overlap.jsonl overlap-none.svg overlap-causal.svg; do
  [[ -s $work/ov/$f ]] || fail "bench overlap wrote no $f"
done
[[ $(grep -c '"kind":"row"' "$work/ov/overlap.jsonl" 2>/dev/null) -ge 6 ]] && ok "three block sizes x two masks reported" ||
  fail "fewer than 6 rows in overlap.jsonl"
grep -q "shaper held packets back [1-9]" "$work/out5" && ok "the tbf shaper was the bottleneck" || fail "tbf never throttled"
[[ -n $id && $(leftovers "$id") -eq 0 ]] && ok "namespaces removed after the shaped run" || fail "namespaces of '$id' left"

# 5. The switch topology: every node reaches every other through the bridge, each node at
# its own address; the payload rate of a 200mbit link is given for predictions.
"$TESTBED" --nodes 3 --topology switch --link 200mbit -- bash -c '
  L="{launch}"
  echo "ID=$(echo "$L" | sed "s/.* //; s/-{rank}//")"
  [[ "{hosts}" == "10.213.0.1:7700,10.213.0.2:7700,10.213.0.3:7700" ]] || exit 12
  (({payload} > 23800000 && {payload} < 24000000)) || exit 13
  pids=()
  for r in 0 1 2; do  # each node accepts its two peers, reads a byte from each
    ${L//\{rank\}/$r} /usr/bin/python3 -c "
import socket
s = socket.create_server((\"10.213.0.$((r + 1))\", 7700))
s.settimeout(20)
for _ in range(2):
    c, _ = s.accept(); c.settimeout(20); assert c.recv(1) == b\"x\"" & pids+=($!)
  done
  for r in 0 1 2; do for t in 1 2 3; do
    ((t == r + 1)) && continue
    ${L//\{rank\}/$r} /usr/bin/python3 -c "
import socket, time
for i in range(100):
    try:
        socket.create_connection((\"10.213.0.$t\", 7700), timeout=5).sendall(b\"x\"); break
    except ConnectionRefusedError:
        time.sleep(0.1)
else:
    raise SystemExit(1)" || exit 14
  done; done
  for p in "${pids[@]}"; do wait "$p" || exit 15; done' >"$work/out6" 2>&1
rc=$?
id=$(sed -n 's/^ID=//p' "$work/out6")
if [[ $rc -eq 0 ]]; then ok "switch topology: 3 nodes, each pair connected both ways, payload rate given"
else fail "switch topology (rc $rc: 12 hosts, 13 payload, 14 a connection, 15 an accept):"; cat "$work/out6"; fi
[[ -n $id && $(leftovers "$id") -eq 0 && $(ip netns list | grep -c "^$id-sw") -eq 0 ]] &&
  ok "switch topology: the nodes' and the switch's namespaces removed" || fail "namespaces of '$id' left"

# 6. A rank that is done closes without cutting its last bytes short. On a 50mbit link
# rank 0 gives 16 MB to an all-gather and rank 1 four bytes: rank 0 has what it needs at
# once and closes the ring while most of its 16 MB still wait in its socket (a reset there
# used to drop them: "connection reset in the middle of a frame"); rank 1 gets every byte.
if [[ -n $PYDIR ]]; then
  cat >"$work/gather.py" <<'PY'
import sys
import numpy as np
import ringattn
r, peers, n = int(sys.argv[1]), sys.argv[2].split(","), 4 << 20
data = np.zeros(n + 1, dtype=np.float32)
if r == 0:
    data[:n] = np.arange(n, dtype=np.float32)
else:
    data[n] = 7.0
with ringattn.Ring(rank=r, world_size=2, peers=peers, token="testbed-flush-token-0123456789ab", timeout=60,
                   connect_timeout=60) as ring:
    ring.all_gather(data, [n, 1])
if r == 1 and not (np.array_equal(data[:n], np.arange(n, dtype=np.float32)) and data[n] == 7.0):
    raise SystemExit("rank 1: the gathered 16 MB differ from rank 0's")
print(f"rank {r}: gathered", flush=True)
PY
  "$TESTBED" --nodes 2 --link 50mbit -- bash -c '
    L="{launch}"
    # Socket buffers up to 64 MB in both namespaces: the whole 16 MB fits in rank 0'"'"'s
    # socket, so most of it is still there when rank 0 closes.
    for r in 0 1; do ${L//\{rank\}/$r} sysctl -q -w net.ipv4.tcp_wmem="4096 16384 67108864" \
      net.ipv4.tcp_rmem="4096 131072 67108864" || exit 20; done
    for r in 0 1; do PYTHONPATH='"$PYDIR"' ${L//\{rank\}/$r} /usr/bin/python3 '"$work/gather.py"' $r {hosts} & pids+=($!); done
    rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    exit $rc' >"$work/out7" 2>&1
  rc=$?
  if [[ $rc -eq 0 ]] && grep -q "rank 1: gathered" "$work/out7"; then
    ok "a rank done first closes without dropping its last 16 MB on a 50mbit link"
  else
    fail "the last bytes of a rank that closed first (rc $rc):"; grep -v "info:" "$work/out7" | tail -n 15
  fi
else
  echo "(no Python module given: the close-flush case is left out)"
fi

echo "testbed: $failures failure(s)"
exit $((failures > 0))
