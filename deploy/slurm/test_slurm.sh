#!/usr/bin/env bash
# Tests deploy/slurm/ringattn.sbatch for real on a single-node Slurm cluster that this script
# starts itself on loopback (munged, slurmctld, slurmd; state, logs and sockets in a temp dir;
# all stopped on exit, also on failure). Needs root (slurmd) and Debian's slurmctld, slurmd,
# slurm-client and munge.
#   1. the cluster: the node "localhost" (127.0.0.1, 4 CPUs declared) becomes idle;
#      `srun -n 2` and `srun -n 3` start every task with its own SLURM_PROCID. Every job waits
#      for the node to be idle first (the last one may still hold it: "srun: job 3 queued and
#      waiting for resources"), and srun's own informational lines are not the tasks' output
#   2. the batch script with a stand-in daemon (a fake `ringattn`: serve answers /healthz and
#      drains on SIGTERM, submit computes the job with `build/ringattn run`): checks the
#      script's wiring (ranks 0..2, world 3, master, per-task ports, one token, status, every
#      job line with its flags, the drain) and the outputs against float64 attention
#   3. the same with the real `ringattn serve`/`submit`/`status` (build/ringattn): 3 daemons,
#      3 jobs (plain, causal zigzag with lse, sliding-window striped), every output within
#      fp32 tolerance (2e-5) of float64 attention. Skipped until `ringattn serve` is built.
# Ends with "test_slurm: N passed, N failed[, N skipped]".
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
python=/usr/bin/python3
real_bin=${RINGATTN_BIN:-$repo/build/ringattn}
script=$here/ringattn.sbatch

passed=0
failed=0
skipped=0
ok() { echo "  ok: $*"; passed=$((passed + 1)); }
bad() { echo "  FAILED: $*"; failed=$((failed + 1)); }
skip() { echo "  skip: $*"; skipped=$((skipped + 1)); }
verdict() { echo "test_slurm: $passed passed, $failed failed, $skipped skipped"; }

for c in munged slurmctld slurmd srun sbatch sinfo scontrol scancel squeue; do
  if ! command -v "$c" >/dev/null; then
    echo "test_slurm: $c not found (apt-get install slurmd slurmctld slurm-client munge: deploy/setup.sh)"
    failed=1
    verdict
    exit 1
  fi
done
if [[ $(id -u) -ne 0 ]]; then
  skip "slurmd must run as root"
  verdict
  exit 0
fi

# --- the private cluster -----------------------------------------------------------------
tmp=$(mktemp -d /tmp/ringattn-slurm.XXXXXX)
chmod 711 "$tmp"  # munged wants every directory above its socket searchable
pids=()           # what this script started, stopped in reverse order
cleanup() {
  local rc=$? p i
  set +e
  if [[ -f $tmp/slurm.conf ]] && scontrol ping >/dev/null 2>&1; then
    scancel --user=root >/dev/null 2>&1  # every job of this private cluster (SLURM_CONF)
    for ((i = 0; i < 40; i++)); do [[ -z $(squeue -h 2>/dev/null) ]] && break; sleep 0.5; done
  fi
  # the stand-in daemons record their pids; Slurm has normally ended them already
  for p in $(cat "$tmp"/fake/pid.* 2>/dev/null); do kill "$p" 2>/dev/null; done
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    p=${pids[i]}
    kill "$p" 2>/dev/null
    for ((n = 0; n < 50; n++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  if ((rc != 0 || failed != 0)); then
    for f in "$tmp"/log/*.log; do
      [[ -f $f ]] || continue
      echo "--- last lines of $f"
      tail -n 15 "$f"
    done
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_ports() {  # free_ports N: the first of N consecutive free loopback TCP ports
  "$python" - "$1" <<'EOF'
import random, socket, sys
n = int(sys.argv[1])
for _ in range(200):
    base = random.randrange(20000, 60000 - n)
    socks = []
    try:
        for p in range(base, base + n):
            s = socket.socket()
            s.bind(("127.0.0.1", p))
            socks.append(s)
    except OSError:
        continue
    finally:
        for s in socks:
            s.close()
    print(base)
    sys.exit(0)
sys.exit("no free ports")
EOF
}

echo "== 1. a single-node Slurm cluster on localhost"
mkdir -p "$tmp/munge" "$tmp/state" "$tmp/spool" "$tmp/log" "$tmp/run" "$tmp/fake" "$tmp/job"
chmod 755 "$tmp/munge"
(umask 077 && head -c 1024 /dev/urandom >"$tmp/munge/munge.key")
chmod 400 "$tmp/munge/munge.key"
sock=$tmp/munge/munge.sock
munged -F --socket="$sock" --key-file="$tmp/munge/munge.key" --pid-file="$tmp/munge/munged.pid" \
  --log-file="$tmp/log/munged.log" --seed-file="$tmp/munge/munged.seed" --num-threads=2 \
  >>"$tmp/log/munged.log" 2>&1 &
pids+=($!)
for ((i = 0; i < 50; i++)); do [[ -S $sock ]] && break; sleep 0.1; done
if munge -S "$sock" -n | unmunge -S "$sock" >/dev/null 2>&1; then ok "munged answers on $sock"; else bad "munged"; exit 1; fi

ctld_port=$(free_ports 1)
slurmd_port=$(free_ports 1)
cat >"$tmp/slurm.conf" <<EOF
# a throw-away single-node cluster: everything on 127.0.0.1, no cgroups, no accounting
ClusterName=ringattn-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
# bind to the nodes' own address (127.0.0.1), not to every interface
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/run/slurmctld.pid
SlurmdPidFile=$tmp/run/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
# containers have no delegated cgroup tree: track processes through /proc, bind no CPUs
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# 4 CPUs declared whatever the machine has, so that 3 tasks fit on a 2-vCPU runner
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerParameters=sched_interval=1
KillWait=10
SlurmctldDebug=info
SlurmdDebug=info
NodeName=localhost NodeAddr=127.0.0.1 NodeHostname=localhost CPUs=4 State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=30 State=UP OverSubscribe=YES
EOF
export SLURM_CONF=$tmp/slurm.conf
slurmctld -D -c -f "$SLURM_CONF" >>"$tmp/log/slurmctld.out" 2>&1 &
pids+=($!)
for ((i = 0; i < 100; i++)); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.2; done
slurmd -D -N localhost -f "$SLURM_CONF" >>"$tmp/log/slurmd.out" 2>&1 &
pids+=($!)
state=
for ((i = 0; i < 120; i++)); do
  state=$(sinfo -h -n localhost -o %t 2>/dev/null || true)
  [[ $state == idle ]] && break
  sleep 0.5
done
if [[ $state == idle ]]; then
  ok "slurmctld :$ctld_port and slurmd :$slurmd_port up, node localhost idle"
else
  bad "node localhost is '${state:-unknown}', not idle"
  exit 1
fi
# Before each job: no job queued or running (a finished one may still be completing) and the
# node idle again, within 60 s; else the job would queue behind it.
wait_idle() {
  local i node jobs
  for ((i = 0; i < 120; i++)); do
    node=$(sinfo -h -n localhost -o %t 2>/dev/null || true)
    jobs=$(squeue -h -o '%i %T' 2>/dev/null || echo '?')
    [[ -z $jobs && $node == idle ]] && return 0
    sleep 0.5
  done
  bad "the node is '${node:-unknown}' with jobs '${jobs//$'\n'/; }' after 60 s, not idle"
  return 1
}
# srun's own lines about its allocation ("srun: job 3 queued and waiting for resources",
# "srun: job 3 has been allocated resources"), which --quiet should already keep away: never
# the tasks' output. Everything else, srun's errors included, is compared.
tasks_only() { grep -Ev '^srun: job [0-9]+ (queued and waiting for resources|has been allocated resources)$' || true; }
for n in 2 3; do
  wait_idle || true
  # shellcheck disable=SC2016  # expanded by the tasks
  out=$(timeout 60 srun --quiet -n "$n" bash -c 'echo "$SLURM_PROCID/$SLURM_NTASKS $(hostname)"' 2>&1 | tasks_only | sort) || true
  want=$(for ((r = 0; r < n; r++)); do echo "$r/$n $(hostname)"; done)
  if [[ $out == "$want" ]]; then ok "srun -n $n: ranks 0..$((n - 1)) ran"; else bad "srun -n $n: $out"; fi
done
wait_idle || true
out=$( (timeout 60 srun --quiet -n 3 hostname 2>&1 || echo "srun exit $?") | tasks_only)
want=$(for ((r = 0; r < 3; r++)); do hostname; done)
if [[ $out == "$want" ]]; then ok "srun -n 3 hostname: $(tr '\n' ' ' <<<"$out")"; else bad "srun -n 3 hostname: $out"; fi

# --- inputs, job file and the check --------------------------------------------------------
# 384 tokens (divisible into 2P zigzag chunks for P = 3), 4 query heads on 2 KV heads, head_dim 64.
"$python" - "$tmp/job" <<'EOF'
import numpy as np, sys
d = sys.argv[1]
rng = np.random.default_rng(2026)
N, H, KV, D = 384, 4, 2, 64
for name, shape in (("q", (N, H, D)), ("k", (N, KV, D)), ("v", (N, KV, D))):
    np.save(f"{d}/{name}.npy", rng.standard_normal(shape).astype(np.float32))
EOF
cat >"$tmp/job/jobs.txt" <<'EOF'
# q k v out [flags]: relative to this file
q.npy k.npy v.npy out/plain.npy

q.npy k.npy v.npy out/causal.npy --causal --layout zigzag --lse out/causal.lse.npy
q.npy k.npy v.npy out/window.npy --window 64 --layout striped
EOF
check_outputs() {  # check_outputs DIR: every job's O (and lse) against float64 attention
  "$python" - "$1" <<'EOF'
import numpy as np, os, sys
d = sys.argv[1]
q, k, v = (np.load(f"{d}/{n}.npy").astype(np.float64) for n in "qkv")
N, H, D = q.shape
rep = H // k.shape[1]
k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
i, j = np.arange(N)[:, None], np.arange(N)[None, :]
masks = {"plain": np.ones((N, N), bool), "causal": j <= i, "window": (j <= i) & (j > i - 64)}
bad = 0
for name, mask in masks.items():
    s = np.einsum("ihd,jhd->hij", q, k) / np.sqrt(D)
    s = np.where(mask[None], s, -np.inf)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    l = p.sum(-1, keepdims=True)
    o = np.einsum("hij,jhd->ihd", p / l, v)
    lse = (m + np.log(l))[..., 0].T
    path = f"{d}/out/{name}.npy"
    if not os.path.exists(path):
        print(f"    {name}: no output {path}")
        bad += 1
        continue
    got = np.load(path)
    err = float(np.abs(got.astype(np.float64) - o).max()) if got.shape == o.shape else float("inf")
    line = f"    {name}: max |O - O_float64| = {err:.2e}"
    if os.path.exists(f"{d}/out/{name}.lse.npy"):
        gl = np.load(f"{d}/out/{name}.lse.npy")
        el = float(np.abs(gl.astype(np.float64) - lse).max()) if gl.shape == lse.shape else float("inf")
        line += f", max |lse - lse_float64| = {el:.2e}"
        err = max(err, el)
    ok = err <= 2e-5
    bad += not ok
    print(line + ("  exact (<= 2e-5)" if ok else "  MISMATCH"))
sys.exit(1 if bad else 0)
EOF
}

run_batch() {  # run_batch NAME BIN: sbatch --wait the script on 3 tasks with BIN; prints its output
  local name=$1 bin=$2 out rc=0 master_port control_base metrics_base
  master_port=$(free_ports 1)
  control_base=$(free_ports 3)
  metrics_base=$(free_ports 3)
  echo "$master_port $control_base $metrics_base" >"$tmp/ports-$name"
  rm -rf "$tmp/job/out" && mkdir -p "$tmp/job/out"
  wait_idle || true
  out=$tmp/log/sbatch-$name.log
  timeout 300 env RINGATTN_BIN="$bin" RINGATTN_MASTER_PORT="$master_port" \
    RINGATTN_CONTROL_PORT="$control_base" RINGATTN_METRICS_PORT="$metrics_base" RINGATTN_BIND=127.0.0.1 \
    RINGATTN_THREADS=1 RINGATTN_FORM_TIMEOUT=60 RINGATTN_GRACE=10 RINGATTN_STOP_TIMEOUT=40 \
    sbatch --wait --quiet -n 3 --ntasks-per-node=3 --time=5 --job-name="ringattn-$name" \
    --output="$out" "$script" "$tmp/job/jobs.txt" || rc=$?
  sed 's/^/    | /' "$out" 2>/dev/null || true
  return "$rc"
}

echo "== 2. ringattn.sbatch with a stand-in daemon (the script's wiring)"
# serve: records its arguments, answers /healthz 200 on its metrics address, drains on SIGTERM
cat >"$tmp/fake/serve.py" <<'EOF'
import hashlib, http.server, os, signal, sys
args = sys.argv[1:]
opt = {a: args[i + 1] for i, a in enumerate(args[:-1]) if a.startswith("--")}
fake = os.environ["FAKE_DIR"]
rank = opt["--rank"]
token = os.environ.get("RINGATTN_TOKEN", "")
if "--token-file" in opt:
    token = open(opt["--token-file"]).read().strip()
with open(f"{fake}/pid.{rank}", "w") as f:
    f.write(str(os.getpid()))
with open(f"{fake}/started.{rank}", "w") as f:
    f.write(" ".join([opt.get("--world-size", "?"), opt.get("--master", "?"), opt.get("--control", "?"),
                      opt.get("--metrics", "?"), opt.get("--threads", "-"),
                      hashlib.sha256(token.encode()).hexdigest()[:16], str(len(token))]))

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"ok\n" if self.path == "/healthz" else b"# fake\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass

class Server(http.server.HTTPServer):
    def handle_error(self, request, client_address):
        pass  # a probe that hangs up after the status line

def drain(*_):
    open(f"{fake}/drained.{rank}", "w").close()
    os._exit(0)

signal.signal(signal.SIGTERM, drain)
host, port = opt["--metrics"].rsplit(":", 1)
Server((host, int(port)), Health).serve_forever()
EOF
cat >"$tmp/fake/ringattn" <<'EOF'
#!/usr/bin/env bash
# stand-in for ringattn serve/status/submit (see test_slurm.sh)
set -euo pipefail
cmd=$1
shift
case $cmd in
  serve) exec /usr/bin/python3 "$FAKE_DIR/serve.py" "$@" ;;
  status) echo "fake status $*"; echo "status" >>"$FAKE_DIR/calls" ;;
  submit)
    run=()
    while (($#)); do
      case $1 in
        --to) echo "to $2" >>"$FAKE_DIR/calls"; shift 2 ;;
        --token-file) [[ $(stat -c %a "$2") == 600 ]] || { echo "token file $2 not 0600" >&2; exit 2; }; shift 2 ;;
        --dtype) run+=(--dtype "${2/f32/fp32}"); shift 2 ;;
        --json | --tls) shift ;;
        *) run+=("$1"); shift ;;
      esac
    done
    echo "submit ${run[*]}" >>"$FAKE_DIR/calls"
    exec "$REAL_RINGATTN" run --nodes 3 --quiet "${run[@]}" ;;
  *) echo "fake ringattn: unknown command $cmd" >&2; exit 2 ;;
esac
EOF
chmod 755 "$tmp/fake/ringattn"
if [[ -x $real_bin ]]; then
  rc=0
  FAKE_DIR=$tmp/fake REAL_RINGATTN=$real_bin run_batch fake "$tmp/fake/ringattn" || rc=$?
  if ((rc == 0)); then ok "sbatch --wait: exit 0"; else bad "sbatch --wait: exit $rc"; fi
  read -r master_port control_base metrics_base <"$tmp/ports-fake"
  started=$(for r in 0 1 2; do echo "$r $(cat "$tmp/fake/started.$r" 2>/dev/null)"; done)
  sed 's/^/    started: /' <<<"$started"
  # rank world master control metrics threads token-hash token-length
  want=$(for r in 0 1 2; do
    echo "$r 3 localhost:$master_port 127.0.0.1:$((control_base + r)) 127.0.0.1:$((metrics_base + r)) 1"
  done)
  tokens=$(awk '{print $7 "/" $8}' <<<"$started" | sort -u)
  if [[ $(cut -d' ' -f1-6 <<<"$started") == "$want" ]]; then
    ok "ranks 0,1,2: world 3, master localhost:$master_port, control/metrics ports base + local id, --threads 1"
  else
    bad "daemon arguments, want:"
    sed 's/^/    /' <<<"$want"
  fi
  if [[ $(wc -l <<<"$tokens") -eq 1 && $tokens == */64 ]]; then
    ok "one fresh 64-hex-digit token on every rank (srun environment)"
  else
    bad "tokens: $tokens"
  fi
  calls=$(cat "$tmp/fake/calls" 2>/dev/null || true)
  if [[ $(grep -c '^submit' <<<"$calls") -eq 3 && $(grep -c '^status' <<<"$calls") -eq 1 ]] &&
    grep -q -- "--causal --layout zigzag --lse $tmp/job/out/causal.lse.npy" <<<"$calls" &&
    grep -q -- "--window 64 --layout striped" <<<"$calls"; then
    ok "status once, 3 submits with their flags (relative paths resolved)"
  else
    bad "submit calls: $calls"
  fi
  if [[ -e $tmp/fake/drained.0 && -e $tmp/fake/drained.1 && -e $tmp/fake/drained.2 ]]; then
    ok "all 3 daemons got SIGTERM and drained"
  else
    bad "drain: $(ls "$tmp/fake")"
  fi
  if check_outputs "$tmp/job"; then ok "outputs exact"; else bad "outputs"; fi
else
  skip "no $real_bin (the stand-in's submit runs it)"
fi

echo "== 3. ringattn.sbatch with ringattn serve (3 daemons, 3 jobs)"
if [[ -x $real_bin ]] && "$real_bin" serve --help >/dev/null 2>&1; then
  rc=0
  run_batch real "$real_bin" || rc=$?
  if ((rc == 0)); then ok "sbatch --wait: exit 0 (3 jobs ok, daemons drained)"; else bad "sbatch --wait: exit $rc"; fi
  if check_outputs "$tmp/job"; then ok "outputs exact"; else bad "outputs"; fi
else
  skip "ringattn serve not built"
fi

verdict
((failed == 0))
