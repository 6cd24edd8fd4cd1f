#!/usr/bin/env bash
# Validates deploy/k8s offline: no cluster, no network, nothing left running.
#
# kubectl cannot check a manifest without an API server: even `apply --dry-run=client` and
# `create --dry-run=client --validate=false` first ask the server for its discovery document
# and OpenAPI schema (they fail with "connection refused" when no cluster is configured). So:
#   1. check_manifest.py: every document decoded into the official Kubernetes client's typed
#      models (python3-kubernetes, generated from the API's OpenAPI spec) and serialized back
#      unchanged (missing required fields, wrong types, unknown/misspelt fields fail), plus
#      what ringattn needs (headless Service, Parallel StatefulSet, rank, master, probes,
#      annotations, resources, security context, Secret volume 0400 matching the Secret)
#   2. negative cases: ten broken copies of the files, each must fail with its own message
#   3. the Secret the header's `kubectl create secret ... --dry-run=client -o yaml` makes (this
#      kubectl command needs no server) passes the same check against the StatefulSet
#   4. the container's start script, run by sh on a kubelet-like Secret directory (symlinks
#      ..data/token, mode 0440 as with fsGroup): it derives the rank from the pod-index label,
#      else from the hostname, refuses a hostname without one, and copies the token to a 0600
#      file; the real token loader (build/ringattn node, net/secret.cpp) refuses the 0440
#      Secret file, accepts the copy and accepts a 0400 file behind the same symlinks
#   5. the pods, simulated on loopback with the real `ringattn serve` (once built): each of the 3
#      runs the container's start script with the container's env as kubelet would expand it
#      (pod-index label set on two pods, absent on one; $(POD_IP) = 127.0.0.1), except that the
#      pod DNS name becomes 127.0.0.1 and the fixed ports become free ones; the readiness probe
#      (/healthz 200) passes on all, the liveness port answers, a job submitted to rank 0 is
#      exact, and SIGTERM ends every pod with exit 0 within terminationGracePeriodSeconds
# Ends with "test_k8s: N passed, N failed".
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
python=/usr/bin/python3
check="$python $here/check_manifest.py"
manifest=$here/ringattn.yaml
secret=$here/ringattn-secret.example.yaml

tmp=$(mktemp -d)
pids=()  # the simulated pods (step 5), ended on exit
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

passed=0
failed=0
ok() { echo "  ok: $*"; passed=$((passed + 1)); }
bad() { echo "  FAILED: $*"; failed=$((failed + 1)); }

if ! "$python" -c 'import yaml, kubernetes' 2>/dev/null; then
  echo "test_k8s: python3-yaml and python3-kubernetes are needed (deploy/setup.sh installs them)"
  echo "test_k8s: 0 passed, 1 failed"
  exit 1
fi

echo "== 1. the manifest and the Secret example"
if $check "$manifest" "$secret"; then ok "ringattn.yaml + ringattn-secret.example.yaml"; else bad "the shipped files"; fi

echo "== 2. broken copies must fail"
negative() {  # negative NAME EXPECTED-MESSAGE FILE SED-EXPR [SECRET-SED-EXPR]
  local name=$1 want=$2 file=$3 expr=$4 sexpr=${5:-}
  local m=$tmp/$name.yaml s=$tmp/$name-secret.yaml out rc=0
  sed "$expr" "$file" >"$m"
  sed "${sexpr:-p;d}" "$secret" >"$s"
  if cmp -s "$m" "$file" && cmp -s "$s" "$secret"; then
    bad "$name: the edit changed nothing (the test is stale)"
    return
  fi
  out=$($check "$m" "$s" 2>&1) || rc=$?
  if [[ $rc -ne 0 ]] && grep -qF -- "$want" <<<"$out"; then
    ok "$name: rejected ($(grep -F -- "$want" <<<"$out" | head -n1 | sed 's/^ *//' | cut -c1-110))"
  else
    bad "$name: exit $rc, expected a line with '$want':"
    sed 's/^/    /' <<<"$out"
  fi
}
negative typo-field "readinessProbes: unknown field" "$manifest" 's/^\( *\)readinessProbe:/\1readinessProbes:/'
negative wrong-type "invalid literal for int()" "$manifest" 's/^  replicas: 3$/  replicas: three/'
negative coerced-type "is not of the API's type" "$manifest" 's/^  replicas: 3$/  replicas: "3"/'
negative no-containers "must not be \`None\`" "$manifest" 's/^      containers:$/      containerz:/'
negative bad-yaml "mapping values are not allowed" "$manifest" '0,/^  clusterIP: None$/s//  clusterIP None/'
negative secret-mode "defaultMode 420" "$manifest" 's/defaultMode: 0400/defaultMode: 0644/'
negative ordered-ready "podManagementPolicy must be Parallel" "$manifest" 's/podManagementPolicy: Parallel/podManagementPolicy: OrderedReady/'
negative not-ready-dns "publishNotReadyAddresses" "$manifest" 's/publishNotReadyAddresses: true/publishNotReadyAddresses: false/'
negative world-size "differs from replicas" "$manifest" '/name: RINGATTN_WORLD_SIZE/{n;s/"3"/"4"/}'
negative secret-name "is not the one mounted" "$manifest" 'p;d' 's/name: ringattn-token/name: ringattn-tokens/'

echo "== 3. the Secret made by kubectl create --dry-run=client"
if command -v kubectl >/dev/null; then
  made=$tmp/made-secret.yaml
  # the header's command (a fixed token here; nothing is sent anywhere)
  if KUBECONFIG=/dev/null kubectl create secret generic ringattn-token \
      --from-literal=token=0123456789abcdef0123456789abcdef --dry-run=client -o yaml >"$made" 2>"$tmp/kubectl.err"; then
    # kubectl writes metadata.creationTimestamp: null, which the models leave out: drop it
    sed -i '/creationTimestamp: null/d' "$made"
    if $check "$manifest" "$made"; then ok "kubectl's Secret matches the StatefulSet"; else bad "kubectl's Secret"; fi
  else
    bad "kubectl create secret --dry-run=client: $(cat "$tmp/kubectl.err")"
  fi
else
  echo "  skip: no kubectl"
fi

echo "== 4. the container's start script"
# The script of the manifest, with the container's paths moved into $tmp and exec replaced by a
# stand-in that prints its arguments and the token copy's mode.
"$python" - "$manifest" >"$tmp/start.sh" <<'EOF'
import sys, yaml
sts = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get("kind") == "StatefulSet"][0]
c = sts["spec"]["template"]["spec"]["containers"][0]
assert c["command"][:2] == ["/bin/sh", "-c"], c["command"][:2]
print(c["command"][2])
EOF
sed -i -e "s#/etc/ringattn-secret#$tmp/secret#g" -e "s#/run/ringattn#$tmp/run#g" \
  -e "s#exec /usr/local/bin/ringattn#exec $tmp/fake-ringattn#" "$tmp/start.sh"
cat >"$tmp/fake-ringattn" <<'EOF'
#!/bin/sh
tok=$(echo "$@" | sed -n 's/.*--token-file \([^ ]*\).*/\1/p')
echo "args: $* | token mode $(stat -c %a "$tok") $(stat -c %F "$tok")"
EOF
chmod 755 "$tmp/fake-ringattn"
# kubelet's layout of a Secret volume: token -> ..data/token, ..data -> ..<timestamp>/
mkdir -p "$tmp/run" "$tmp/secret/..2026_01_01_00_00_00.000000001"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/secret/..2026_01_01_00_00_00.000000001/token"
chmod 0440 "$tmp/secret/..2026_01_01_00_00_00.000000001/token"
ln -s ..2026_01_01_00_00_00.000000001 "$tmp/secret/..data"
ln -s ..data/token "$tmp/secret/token"
start() {  # start POD_INDEX HOSTNAME: runs the script like the container would
  env -i PATH=/usr/bin:/bin RINGATTN_POD_INDEX="$1" HOSTNAME="$2" sh "$tmp/start.sh" 2>&1
}
out=$(start 2 ringattn-2) && [[ $out == *"serve --rank 2 --token-file $tmp/run/token | token mode 600 regular file"* ]] &&
  ok "pod-index label 2 -> --rank 2, token copied with mode 600" || bad "pod-index label: $out"
out=$(start "" ringattn-1) && [[ $out == *"serve --rank 1 "* ]] &&
  ok "no label (Kubernetes < 1.28), hostname ringattn-1 -> --rank 1" || bad "hostname fallback: $out"
rc=0
out=$(start "" ringattn) || rc=$?
[[ $rc -eq 2 && $out == *"no rank"* ]] && ok "hostname without ordinal: exit 2, '$out'" || bad "no ordinal: exit $rc, $out"

# The daemon's token loader itself (net/secret.cpp load_secret, reached through `ringattn node`,
# which loads the token before it touches its peers): a refusal names the token file.
if [[ -x $repo/build/ringattn ]]; then
  "$python" -c 'import numpy as np; [np.save(f"'"$tmp"'/{n}.npy", np.zeros((4, 1, 32), np.float32)) for n in "qkv"]'
  loads() {  # loads FILE: "accepted" (it went on to dial the peers), "refused: why" or "unexpected: output"
    local out
    out=$(timeout 30 "$repo/build/ringattn" node --rank 0 --nodes 2 --q "$tmp/q.npy" --k "$tmp/k.npy" \
      --v "$tmp/v.npy" --peers 127.0.0.1:1,127.0.0.1:2 --timeout 1 --out-dir "$tmp" --quiet \
      --token-file "$1" 2>&1) || true
    if grep -q "error: .*token file" <<<"$out"; then
      echo "refused: $(grep -m1 -o 'token file.*' <<<"$out")"
    elif grep -q "error: .*could not connect" <<<"$out"; then
      echo accepted
    else
      echo "unexpected: $out"
    fi
  }
  r=$(loads "$tmp/secret/token")
  [[ $r == refused:*"has mode 0440"* ]] && ok "the raw Secret file (0440 with fsGroup) is ${r:0:120}" ||
    bad "the group-readable (0440) Secret file: $r"
  r=$(loads "$tmp/run/token")
  [[ $r == accepted ]] && ok "the 0600 copy is accepted" || bad "the 0600 copy: $r"
  chmod 0400 "$tmp/secret/..data/token"
  r=$(loads "$tmp/secret/token")
  [[ $r == accepted ]] && ok "a 0400 file behind the Secret's symlinks is accepted (symlinks are followed)" ||
    bad "a 0400 file behind symlinks: $r"
else
  echo "  skip: build/ringattn not built (token loader checks)"
fi

echo "== 5. three pods simulated on loopback (ringattn serve)"
if [[ -x $repo/build/ringattn ]] && "$repo/build/ringattn" serve --help >/dev/null 2>&1; then
  # per pod: an env file (the container's env, expanded as kubelet does) and its ports
  "$python" - "$manifest" "$tmp/pods" "$repo/tests/python" <<'EOF'
import math, os, re, sys, yaml
manifest, out = sys.argv[1], sys.argv[2]
sys.path.insert(0, sys.argv[3])
from ports import free_port as free  # distinct, below the ephemeral range
os.makedirs(out)
sts = [d for d in yaml.safe_load_all(open(manifest)) if d and d.get("kind") == "StatefulSet"][0]
name, svc, n = sts["metadata"]["name"], sts["spec"]["serviceName"], sts["spec"]["replicas"]
c = sts["spec"]["template"]["spec"]["containers"][0]
ports = {p["name"]: p["containerPort"] for p in c["ports"]}

master_port = free()
for i in range(n):
    pod = {"ring": free(), "control": free(), "metrics": free()}
    env = {}
    for e in c["env"]:
        if "value" in e:
            v = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), e["value"])
        else:
            ref = e["valueFrom"]
            if "fieldRef" in ref:
                v = {"metadata.namespace": "default", "status.podIP": "127.0.0.1",
                     "metadata.labels['apps.kubernetes.io/pod-index']": "" if i == 1 else str(i)}[
                         ref["fieldRef"]["fieldPath"]]
            else:  # resourceFieldRef limits.cpu, divisor 1: rounded up
                v = str(math.ceil(float(c["resources"]["limits"]["cpu"])))
        env[e["name"]] = v
    # what only a cluster has: the pod's DNS name, and a network namespace of its own
    dns = f"{name}-0.{svc}.default.svc.cluster.local:{ports['rendezvous']}"
    if env["RINGATTN_MASTER"] != dns:
        sys.exit(f"RINGATTN_MASTER {env['RINGATTN_MASTER']} is not {dns}")
    env["RINGATTN_MASTER"] = f"127.0.0.1:{master_port}"
    for k, port in (("RINGATTN_LISTEN", "ring"), ("RINGATTN_CONTROL", "control"), ("RINGATTN_METRICS", "metrics")):
        host = env[k].rsplit(":", 1)[0]
        if host not in ("0.0.0.0", "127.0.0.1"):
            sys.exit(f"{k}={env[k]}")
        env[k] = f"127.0.0.1:{pod[port]}"
    env["HOSTNAME"] = f"{name}-{i}"
    with open(f"{out}/pod{i}.env", "w") as f:
        f.writelines(f"{k}={v}\n" for k, v in env.items())
    with open(f"{out}/pod{i}.ports", "w") as f:
        f.write(f"{pod['control']} {pod['metrics']}\n")
EOF
  term_grace=$(sed -n 's/^ *terminationGracePeriodSeconds: *//p' "$manifest")
  npods=$(find "$tmp/pods" -name 'pod*.env' | wc -l)
  for ((i = 0; i < npods; i++)); do
    d=$tmp/pods/$i
    mkdir -p "$d/secret" "$d/run"
    cp "$tmp/secret/..data/token" "$d/secret/token"  # the same Secret in every pod, 0440 (fsGroup)
    chmod 0440 "$d/secret/token"
    sed -e "s#$tmp/secret#$d/secret#g" -e "s#$tmp/run#$d/run#g" \
      -e "s#exec $tmp/fake-ringattn#exec $repo/build/ringattn#" "$tmp/start.sh" >"$d/start.sh"
    mapfile -t podenv <"$tmp/pods/pod$i.env"
    env -i PATH=/usr/bin:/bin "${podenv[@]}" sh "$d/start.sh" >"$d/log" 2>&1 &
    pids+=($!)
    echo "$!" >"$d/pid"
  done
  read -r control0 _ <"$tmp/pods/pod0.ports"
  probe() {  # probe PORT: the HTTP status of GET /healthz
    "$python" -c 'import sys, urllib.request as u
try: print(u.urlopen(f"http://127.0.0.1:{sys.argv[1]}/healthz", timeout=2).status)
except Exception as e: print(getattr(e, "code", "down"))' "$1"
  }
  ready=0
  for ((n = 0; n < 120; n++)); do
    ready=0
    for ((i = 0; i < npods; i++)); do
      read -r _ m <"$tmp/pods/pod$i.ports"
      [[ $(probe "$m") == 200 ]] && ready=$((ready + 1))
    done
    ((ready == npods)) && break
    sleep 0.5
  done
  if ((ready == npods)); then
    ok "readiness: /healthz 200 on all $npods pods (ring formed; pod 1's rank from its hostname)"
  else
    bad "readiness: $ready of $npods pods ready"
    for ((i = 0; i < npods; i++)); do tail -n 5 "$tmp/pods/$i/log" | sed "s/^/    pod $i: /"; done
  fi
  ranks=0
  for ((i = 0; i < npods; i++)); do
    grep -q "\"rank\":$i," "$tmp/pods/$i/log" && grep -q "\"msg\":\"rank $i of $npods" "$tmp/pods/$i/log" &&
      ranks=$((ranks + 1))
  done
  if ((ranks == npods)); then ok "pod i is rank i of $npods (JSON log lines, RINGATTN_LOG_FORMAT)"; else bad "ranks: $ranks of $npods"; head -n 2 "$tmp"/pods/*/log; fi
  live=0
  for ((i = 0; i < npods; i++)); do
    read -r _ m <"$tmp/pods/pod$i.ports"
    if timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$m" 2>/dev/null; then live=$((live + 1)); fi
  done
  if ((live == npods)); then ok "liveness: the metrics port accepts TCP on all $npods pods"; else bad "liveness: $live of $npods"; fi
  "$python" - "$tmp" <<'EOF'
import numpy as np, sys
rng = np.random.default_rng(9)
for n, shape in (("q", (256, 4, 32)), ("k", (256, 2, 32)), ("v", (256, 2, 32))):
    np.save(f"{sys.argv[1]}/job-{n}.npy", rng.standard_normal(shape).astype(np.float32))
EOF
  submit_ok=0
  if "$repo/build/ringattn" submit --to "127.0.0.1:$control0" --token-file "$tmp/pods/0/run/token" --quiet \
    --q "$tmp/job-q.npy" --k "$tmp/job-k.npy" --v "$tmp/job-v.npy" --out "$tmp/job-o.npy" --causal \
    >"$tmp/submit.log" 2>&1; then
    "$python" - "$tmp" <<'EOF' && submit_ok=1
import numpy as np, sys
d = sys.argv[1]
q, k, v = (np.load(f"{d}/job-{n}.npy").astype(np.float64) for n in "qkv")
k, v = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)
s = np.einsum("ihd,jhd->hij", q, k) / np.sqrt(q.shape[2])
s = np.where(np.tril(np.ones((256, 256), bool))[None], s, -np.inf)
p = np.exp(s - s.max(-1, keepdims=True))
o = np.einsum("hij,jhd->ihd", p / p.sum(-1, keepdims=True), v)
err = np.abs(np.load(f"{d}/job-o.npy") - o).max()
print(f"    max |O - O_float64| = {err:.2e}")
sys.exit(0 if err <= 2e-5 else 1)
EOF
  fi
  if ((submit_ok)); then ok "a causal job submitted to rank 0 is exact"; else bad "job through the pods"; sed 's/^/    /' "$tmp/submit.log"; fi
  for ((i = 0; i < npods; i++)); do kill -TERM "$(cat "$tmp/pods/$i/pid")"; done
  stopped=0
  for ((i = 0; i < npods; i++)); do
    p=$(cat "$tmp/pods/$i/pid")
    rc=0
    timeout "$term_grace" tail --pid="$p" -f /dev/null || rc=124
    wait "$p" || rc=$?
    if ((rc == 0)); then stopped=$((stopped + 1)); else echo "    pod $i: exit $rc"; tail -n 3 "$tmp/pods/$i/log"; fi
  done
  if ((stopped == npods)); then ok "SIGTERM: all $npods pods exited 0 within ${term_grace} s"; else bad "SIGTERM: $stopped of $npods exited 0"; fi
else
  echo "  skip: ringattn serve not built"
fi

echo "test_k8s: $passed passed, $failed failed"
((failed == 0))
