#!/usr/bin/env bash
# A ring of P network namespaces on one machine, optionally with shaped links, for
# measuring ringattn on links that are not loopback. Needs root, iproute2 and tc.
#
#   deploy/netns/testbed.sh [--nodes P] [--topology ring|switch] [--link RATE | --like F:B [--flops F]]
#                           -- COMMAND [ARGS...]
#
# Topology ring (default): namespace r (named ratb<PID>-r, unique per run) is joined to
# namespace r+1 by a veth pair: "succ" in r (10.213.r.1/24) and "pred" in r+1 (10.213.r.2/24).
# Node r listens on its pred address, so every ring connection runs over its own veth pair;
# only ring neighbours can reach each other.
# Topology switch: every node reaches every other, as on a rack's switch: namespace r has
# one link "eth0" (10.213.0.<r+1>/24) to a bridge in a namespace of its own (ratb<PID>-sw,
# port p<r>); a node's uplink and downlink are each shaped to RATE, so what it sends to all
# its peers together (an all-to-all) shares RATE, as it shares a NIC.
# Nothing is created outside these namespaces and the veths live only inside them.
#
# COMMAND runs in the host namespace; these words in its arguments are replaced:
#   {hosts}   host:port of every node, e.g. 10.213.1.2:7700,10.213.0.2:7700
#   {launch}  a launch prefix for node r: "ip netns exec ratb<PID>-{rank}"
#   {link}    a one-line description of the link, for the outputs
#   {nodes}   P
#   {payload} the payload rate in bytes/s a shaped link carries (RATE less TCP/IP/Ethernet
#             headers at the MTU), for predictions; 0 when unshaped
# so `ringattn run ... --hosts {hosts} --launch {launch}` and `ringattn bench overlap
# --hosts {hosts} --launch {launch} --link {link}` run one node in each namespace.
#
# Shaping (tc tbf on both ends of every veth; this kernel has no netem, so no delay):
#   --link RATE   a tc rate: 200mbit, 5gbit, ... (the wire rate, Ethernet headers included)
#   --like F:B    make this machine's F/B equal a target node's, e.g. 1e12:3.1e9 (the seed's
#                 1 TFLOP/s on 25 GbE): B here = F_here·B/F, F_here measured by running
#                 COMMAND with "--measure-flops b" (b = F/B, the target's crossover in tokens;
#                 `ringattn bench overlap` answers it) or given with --flops. The tbf rate
#                 adds the TCP/IP/Ethernet overhead at the veth MTU so that the payload
#                 rate is B.
# At the end the script reports per link what tc sent and how often the shaper held
# packets back; a shaper that never did was not the bottleneck (a veth pair here is
# CPU-bound near 16-20 Gbit/s, so a 25gbit shaping equals none).
#
# Always tears down, on success, failure, Ctrl-C or SIGTERM: ends COMMAND's process group
# and every process left in the namespaces, then deletes the namespaces (their veths go
# with them). Exit status: COMMAND's, or 1 for a set-up error, 130/143 on a signal.
set -euo pipefail

NODES=2
TOPOLOGY=ring
RATE=""
LIKE=""
FLOPS=""
PORT=7700
MTU=1500
ID="ratb$$"
NS=()
CMD_PID=""

usage() { sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
say() { echo "testbed: $*" >&2; }
die() { say "error: $*"; exit 1; }

while (($#)); do
  case $1 in
    --nodes) NODES=$2; shift 2 ;;
    --topology) TOPOLOGY=$2; shift 2 ;;
    --link) RATE=$2; shift 2 ;;
    --like) LIKE=$2; shift 2 ;;
    --flops) FLOPS=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    --mtu) MTU=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    --) shift; break ;;
    *) say "unknown option '$1'"; usage 2 ;;
  esac
done
(($# > 0)) || die "no COMMAND given (put it after --)"
[[ $NODES =~ ^[0-9]+$ ]] && ((NODES >= 2 && NODES <= 250)) || die "--nodes must be 2..250, got '$NODES'"
[[ -z $RATE || -z $LIKE ]] || die "--link and --like exclude each other"
[[ $TOPOLOGY == ring || $TOPOLOGY == switch ]] || die "--topology is ring or switch, got '$TOPOLOGY'"
[[ $(id -u) -eq 0 ]] || die "needs root (network namespaces and tc)"
command -v ip >/dev/null && command -v tc >/dev/null || die "needs iproute2 (ip, tc)"
CMD=("$@")

# Bits per second of a tc rate ("200mbit", "5gbit", "1.5gbps", a bare number = bit/s).
rate_bits() {
  awk -v r="$1" 'BEGIN {
    if (!match(r, /^[0-9.eE+]+/)) exit 1
    v = substr(r, 1, RLENGTH); u = tolower(substr(r, RLENGTH + 1))
    m["bit"] = 1; m[""] = 1; m["kbit"] = 1e3; m["mbit"] = 1e6; m["gbit"] = 1e9; m["tbit"] = 1e12
    m["bps"] = 8; m["kbps"] = 8e3; m["mbps"] = 8e6; m["gbps"] = 8e9; m["tbps"] = 8e12
    if (!(u in m)) exit 1
    printf "%.0f\n", v * m[u] }'
}

ns_of() { echo "$ID-$1"; }

# Process IDs left in our namespaces (only processes this run started can be there).
ns_pids() { local ns; for ns in "${NS[@]}"; do ip netns pids "$ns" 2>/dev/null || true; done; }

report_shaping() {
  [[ -n $RATE ]] || return 0
  local l ns stats sent over throttled=0 moved=0
  local dev=succ what
  [[ $TOPOLOGY == switch ]] && dev=eth0
  for ((l = 0; l < NODES; l++)); do
    ns=$(ns_of "$l")
    stats=$(tc -s -n "$ns" qdisc show dev $dev 2>/dev/null) || continue
    sent=$(sed -n 's/.*Sent \([0-9]*\) bytes.*/\1/p' <<<"$stats" | head -n 1)
    over=$(sed -n 's/.*overlimits \([0-9]*\).*/\1/p' <<<"$stats" | head -n 1)
    what="$ns -> $(ns_of $(((l + 1) % NODES)))"
    [[ $TOPOLOGY == switch ]] && what="$ns's uplink to the switch"
    say "link $l ($what): tbf $RATE, sent $((${sent:-0} / 1000000)) MB, shaper held packets back ${over:-0} times"
    ((${sent:-0} > 1000000)) && moved=1
    ((${over:-0} > 0)) && throttled=1
  done
  if ((moved && !throttled)); then
    say "the tbf shaper at $RATE never held a packet back: it was not the bottleneck; the CPU was"
    say "(a veth pair on this machine is CPU-bound near 16-20 Gbit/s, so this run was effectively unshaped)"
  fi
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  if [[ -n $CMD_PID ]] && kill -0 "$CMD_PID" 2>/dev/null; then
    kill -TERM -- "-$CMD_PID" 2>/dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$CMD_PID" 2>/dev/null || break; sleep 0.2; done
    kill -KILL -- "-$CMD_PID" 2>/dev/null
    wait "$CMD_PID" 2>/dev/null
  fi
  report_shaping
  local pids
  pids=$(ns_pids)
  if [[ -n $pids ]]; then
    kill -TERM $pids 2>/dev/null
    sleep 0.5
    pids=$(ns_pids)
    [[ -n $pids ]] && kill -KILL $pids 2>/dev/null
  fi
  local ns left=0
  for ns in "${NS[@]}"; do
    ip netns del "$ns" 2>/dev/null
    [[ -e /run/netns/$ns ]] && left=1
  done
  if ((left)); then say "error: could not delete every namespace of $ID"; rc=1
  elif ((${#NS[@]})); then say "removed ${#NS[@]} namespaces ($ID-*) and their veth pairs"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

shape() {  # shape NS DEV
  local bits burst limit
  bits=$(rate_bits "$RATE") || die "cannot read the rate '$RATE' (e.g. 200mbit, 5gbit)"
  # Burst: 200 µs at the rate but at least 128 KiB (two GSO packets of 64 KiB). A real
  # link has no burst: a larger bucket, refilled while a node computes, would let blocks
  # of a few MB leave faster than RATE and move the crossover. Queue: 50 ms but at least
  # 8 MiB, above the 4 MiB a TCP socket may keep queued (TSQ), so the shaper delays
  # packets instead of dropping them.
  burst=$(awk -v b="$bits" 'BEGIN { v = b / 8 * 0.0002; printf "%.0f", v < 131072 ? 131072 : v }')
  limit=$(awk -v b="$bits" 'BEGIN { v = b / 8 * 0.05; printf "%.0f", v < 8388608 ? 8388608 : v }')
  tc -n "$1" qdisc add dev "$2" root tbf rate "$bits" burst "$burst" limit "$limit"
}

# --like: the rate that makes F_here / B equal the target's F / B.
LINK_NOTE=""
if [[ -n $LIKE ]]; then
  [[ $LIKE =~ ^([0-9.eE+]+):([0-9.eE+]+)$ ]] || die "--like takes F:B, e.g. 1e12:3.1e9, got '$LIKE'"
  F_T=${BASH_REMATCH[1]}
  B_T=${BASH_REMATCH[2]}
  B_STAR=$(awk -v f="$F_T" -v b="$B_T" 'BEGIN { v = f / b; printf "%d", 2 * int(v / 2 + 0.5) }')
  if [[ -z $FLOPS ]]; then
    say "measuring this machine's F at b = $B_STAR: ${CMD[*]} --measure-flops $B_STAR"
    FLOPS=$("${CMD[@]}" --measure-flops "$B_STAR" | tail -n 1) || die "the command could not measure F (--measure-flops)"
  fi
  [[ $FLOPS =~ ^[0-9.eE+]+$ ]] || die "F must be a number of FLOP/s, got '$FLOPS'"
  RATE=$(awk -v f="$FLOPS" -v ft="$F_T" -v bt="$B_T" -v mtu="$MTU" \
    'BEGIN { printf "%.0fbit", f * bt / ft * 8 * (mtu + 14) / (mtu - 52) }')
  LINK_NOTE=$(awk -v f="$FLOPS" -v ft="$F_T" -v bt="$B_T" -v b="$B_STAR" \
    'BEGIN { printf "like F:B = %g:%g, F here %.4g GFLOP/s at b = %d, payload B = %.4g GB/s", ft, bt, f / 1e9, b, f * bt / ft / 1e9 }')
  say "$LINK_NOTE -> tbf rate $RATE"
fi
if [[ -n $RATE ]]; then
  BITS=$(rate_bits "$RATE") || die "cannot read the rate '$RATE' (e.g. 200mbit, 5gbit)"
  if ((BITS >= 16000000000)); then
    say "warning: $RATE is at or above what a veth pair moves on this machine (about 16-20 Gbit/s,"
    say "CPU-bound): the shaping will not be the bottleneck, the run is effectively unshaped"
  fi
fi

# --- set up ---------------------------------------------------------------------------------
for ((r = 0; r < NODES; r++)); do
  ns=$(ns_of "$r")
  ip netns add "$ns" || die "cannot create namespace $ns"
  NS+=("$ns")
  ip -n "$ns" link set lo up
done
if [[ $TOPOLOGY == ring ]]; then
  for ((l = 0; l < NODES; l++)); do
    a=$(ns_of "$l")
    b=$(ns_of $(((l + 1) % NODES)))
    ip -n "$a" link add succ mtu "$MTU" type veth peer name pred mtu "$MTU" netns "$b"
    ip -n "$a" addr add "10.213.$l.1/24" dev succ
    ip -n "$b" addr add "10.213.$l.2/24" dev pred
    ip -n "$a" link set succ up
    ip -n "$b" link set pred up
    if [[ -n $RATE ]]; then
      shape "$a" succ
      shape "$b" pred
    fi
  done
  LINKS='^(succ|pred)'
else
  sw=$(ns_of sw)
  ip netns add "$sw" || die "cannot create namespace $sw"
  NS+=("$sw")
  ip -n "$sw" link add br0 type bridge stp_state 0 forward_delay 0
  ip -n "$sw" link set br0 up
  for ((r = 0; r < NODES; r++)); do
    a=$(ns_of "$r")
    ip -n "$sw" link add "p$r" mtu "$MTU" type veth peer name eth0 mtu "$MTU" netns "$a"
    ip -n "$sw" link set "p$r" master br0
    ip -n "$sw" link set "p$r" up
    ip -n "$a" addr add "10.213.0.$((r + 1))/24" dev eth0
    ip -n "$a" link set eth0 up
    if [[ -n $RATE ]]; then
      shape "$a" eth0     # the node's uplink
      shape "$sw" "p$r"   # its downlink
    fi
  done
  LINKS='^eth0'
fi

# A veth reports carrier a moment after both ends are up; start when every end has it.
for _ in $(seq 1 50); do
  down=0
  for ns in "${NS[@]}"; do
    ip -n "$ns" -br link show | grep -E "$LINKS" | grep -qv ' UP ' && down=1
  done
  ((down)) || break
  sleep 0.1
done

HOSTS=""
for ((r = 0; r < NODES; r++)); do
  if [[ $TOPOLOGY == ring ]]; then HOSTS+="${HOSTS:+,}10.213.$(((r - 1 + NODES) % NODES)).2:$PORT"
  else HOSTS+="${HOSTS:+,}10.213.0.$((r + 1)):$PORT"; fi
done
LAUNCH="ip netns exec $ID-{rank}"
SHAPING="unshaped"
[[ -z $RATE ]] || SHAPING="tbf $RATE"
LINK="netns veth $TOPOLOGY of $NODES, MTU $MTU, $SHAPING${LINK_NOTE:+ ($LINK_NOTE)}"
PAYLOAD=0
[[ -z $RATE ]] || PAYLOAD=$(awk -v b="$BITS" -v mtu="$MTU" 'BEGIN { printf "%.0f", b / 8 * (mtu - 52) / (mtu + 14) }')
say "$NODES namespaces $ID-0..$((NODES - 1)), $LINK; nodes at $HOSTS"

ARGS=()
for w in "${CMD[@]}"; do
  w=${w//\{hosts\}/$HOSTS}
  w=${w//\{launch\}/$LAUNCH}
  w=${w//\{link\}/$LINK}
  w=${w//\{nodes\}/$NODES}
  w=${w//\{payload\}/$PAYLOAD}
  ARGS+=("$w")
done

# In its own process group (setsid), so that teardown can end all of it.
setsid "${ARGS[@]}" &
CMD_PID=$!
rc=0
wait "$CMD_PID" || rc=$?
CMD_PID=""
exit "$rc"
