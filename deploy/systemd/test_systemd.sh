#!/usr/bin/env bash
# Checks deploy/systemd offline (no running systemd needed, none is started):
#   1. the unit's ExecStart is where `meson install` puts the program (build/ introspection)
#   2. `systemd-analyze verify` of instances ringattn@0 and ringattn@2 in a private root
#      (--root: a copy of this host's system units, the unit in /etc/systemd/system and the
#      built program at /usr/local/bin/ringattn): any line it prints fails the test
#   3. a broken copy of the unit (a misspelt key, a missing program) makes verify complain:
#      the check above is live
#   4. the hardening keys are present with the intended values, MemoryDenyWriteExecute absent
#   5. `systemd-analyze security --offline` rates the unit's exposure at most 2.0
#   6. ring.toml.example parses as TOML (python3's tomllib), names every key of the spec, and
#      its grace and connect_timeout stay below the unit's TimeoutStopSec
#   7. once `ringattn serve` is built: it knows every flag of ExecStart and every TOML key, and
#      accepts the example with every commented key uncommented
#   8. the unit's ExecStart run by hand as two instances (ringattn@0, ringattn@1; no systemd
#      here): %i, ${CREDENTIALS_DIRECTORY} (a 0400 token file, as LoadCredential makes it),
#      the config and the EnvironmentFile overrides substituted, NOTIFY_SOCKET pointed at a
#      socket of ours: both send READY=1, /healthz says 200, `ringattn status` answers, SIGTERM
#      brings STOPPING=1 and exit 0 well within TimeoutStopSec
# Ends with "test_systemd: N passed, N failed".
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
unit="$here/ringattn@.service"
toml="$here/ring.toml.example"
python=/usr/bin/python3

tmp=$(mktemp -d)
pids=()  # processes this script started (steps 7 and 8), ended on exit
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
# Below the kernel's ephemeral range, so no outgoing connection takes it meanwhile.
free_port() { "$python" "$here/../../tests/python/ports.py" 1; }

passed=0
failed=0
ok() { echo "  ok: $*"; passed=$((passed + 1)); }
bad() { echo "  FAILED: $*"; failed=$((failed + 1)); }

# A private root: the host's system units (sysinit.target & co, which the default dependencies
# name), our unit, and a program at the unit's ExecStart path.
make_root() {  # make_root DIR UNITFILE [PROGRAM]
  local root=$1 file=$2 prog=${3:-}
  mkdir -p "$root/usr/lib/systemd" "$root/etc/systemd/system" "$root/usr/local/bin"
  cp -a /usr/lib/systemd/system "$root/usr/lib/systemd/"
  cp "$file" "$root/etc/systemd/system/ringattn@.service"
  if [[ -n $prog ]]; then cp "$prog" "$root/usr/local/bin/ringattn"; fi
}

# Lines of verify's output that are understood and harmless: none so far. Add a pattern here
# only with the reason next to it.
explained=(
)
unexplained() {  # unexplained FILE: prints the lines of FILE no pattern above explains
  local line p hit
  while IFS= read -r line; do
    [[ -z $line ]] && continue
    hit=0
    for p in "${explained[@]}"; do [[ $line =~ $p ]] && hit=1; done
    ((hit)) || printf '%s\n' "$line"
  done <"$1"
}

echo "== 1. ExecStart is the installed program"
execstart=$(sed -n 's/^ExecStart=//p' "$unit")
prog=${execstart%% *}
if [[ -f $repo/build/build.ninja ]] && command -v meson >/dev/null; then
  prefix=$(meson introspect "$repo/build" --buildoptions | "$python" -c \
    'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"))')
  if meson introspect "$repo/build" --installed | "$python" -c \
      'import json,sys; sys.exit(0 if sys.argv[1] in json.load(sys.stdin).values() else 1)' "$prog"; then
    ok "meson installs $prog (prefix $prefix)"
  else
    bad "meson (prefix $prefix) does not install $prog; ExecStart names it"
  fi
else
  echo "  skip: no configured build/ to introspect"
fi
if [[ ! -x $repo/build/ringattn ]]; then
  echo "test_systemd: 0 passed, 1 failed (build/ringattn is not built: run deploy/setup.sh first)"
  exit 1
fi
binary=$repo/build/ringattn

echo "== 2. systemd-analyze verify (offline, --root)"
make_root "$tmp/root" "$unit" "$binary"
for inst in 0 2; do
  out=$tmp/verify-$inst.txt
  rc=0
  systemd-analyze verify --root="$tmp/root" "ringattn@$inst.service" >"$out" 2>&1 || rc=$?
  left=$(unexplained "$out")
  if [[ $rc -eq 0 && -z $left ]]; then
    ok "ringattn@$inst.service verifies cleanly"
  else
    bad "ringattn@$inst.service: verify exit $rc"
    sed 's/^/    /' "$out"
  fi
done

echo "== 3. verify catches a broken unit (negative cases)"
sed 's/^ProtectSystem=/ProtectSytem=/' "$unit" >"$tmp/typo.service"
make_root "$tmp/root-typo" "$tmp/typo.service" "$binary"
out=$(systemd-analyze verify --root="$tmp/root-typo" ringattn@0.service 2>&1 || true)
if grep -q "Unknown key 'ProtectSytem'" <<<"$out"; then
  ok "a misspelt key is reported ($(grep -o "Unknown key '[^']*'" <<<"$out"))"
else
  bad "a misspelt key went unnoticed: $out"
fi
make_root "$tmp/root-noprog" "$unit"
rc=0
out=$(systemd-analyze verify --root="$tmp/root-noprog" ringattn@0.service 2>&1) || rc=$?
if [[ $rc -ne 0 ]] && grep -q "is not executable" <<<"$out"; then
  ok "a missing program is reported (exit $rc)"
else
  bad "a missing program went unnoticed (exit $rc): $out"
fi

echo "== 4. hardening keys"
# [Service] assignments as KEY=VALUE lines (the unit has no line continuations).
svc=$(awk '/^\[/{s=($0=="[Service]")} s && /^[A-Za-z]+=/' "$unit")
want=(
  "Type=notify"
  "ExecStart=/usr/local/bin/ringattn serve --config /etc/ringattn/ring.toml --rank %i --token-file \${CREDENTIALS_DIRECTORY}/token"
  "LoadCredential=token:/etc/ringattn/token"
  "DynamicUser=yes"
  "ProtectSystem=strict"
  "ProtectHome=yes"
  "PrivateTmp=yes"
  "PrivateDevices=yes"
  "NoNewPrivileges=yes"
  "CapabilityBoundingSet="
  "AmbientCapabilities="
  "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX"
  "SystemCallFilter=@system-service"
  "SystemCallArchitectures=native"
  "RestrictNamespaces=yes"
  "RestrictSUIDSGID=yes"
  "LockPersonality=yes"
  "UMask=0077"
  "Restart=on-failure"
  "KillSignal=SIGTERM"
  "LimitNOFILE=65536"
  "LimitCORE=0"
)
for kv in "${want[@]}"; do
  if grep -qxF -- "$kv" <<<"$svc"; then ok "$kv"; else bad "missing: $kv"; fi
done
if grep -q '^MemoryDenyWriteExecute=yes' <<<"$svc"; then
  bad "MemoryDenyWriteExecute=yes breaks oneDNN's JIT"
else
  ok "MemoryDenyWriteExecute not set (oneDNN JIT)"
fi
stop=$(sed -n 's/^TimeoutStopSec=//p' "$unit")

echo "== 5. systemd-analyze security --offline"
out=$tmp/security.txt
rc=0
systemd-analyze security --offline=yes --root="$tmp/root" --threshold=20 ringattn@0.service >"$out" 2>&1 || rc=$?
level=$(sed -n 's/.*Overall exposure level for ringattn@0.service: \([0-9.]*\).*/\1/p' "$out")
if [[ $rc -eq 0 && -n $level ]]; then
  ok "exposure $level (threshold 2.0)"
else
  bad "exposure ${level:-unknown} (exit $rc)"
  grep -E '✗' "$out" | sed 's/^/    /' || true
fi

echo "== 6. ring.toml.example"
if "$python" - "$toml" "$stop" <<'EOF'; then
import re, sys, tomllib
path, stop = sys.argv[1], float(sys.argv[2])
text = open(path).read()
cfg = tomllib.loads(text)
# every key of the spec, set or shown commented out
keys = """rank world_size peers master listen control metrics token_file tls threads isa wire_dtype
          timeout connect_timeout grace ring_id log_level log_format max_rows max_heads max_kv_heads
          max_head_dim model tokenizer weights_dtype tp api api_key_file cache_mib session_ttl prefill_chunk""".split()
missing = [k for k in keys if not re.search(r"^#?\s*" + k + r"\s*=", text, re.M)]
unknown = [k for k in cfg if k not in keys]
# the commented examples must parse too: uncomment "# key = value" lines and parse again
shown = "\n".join(re.sub(r"^#\s?", "", l) for l in text.splitlines() if re.match(r"^#\s?[a-z_]+\s*=", l))
shown_cfg = tomllib.loads(shown)
grace = cfg.get("grace", 0)
errors = []
if missing: errors.append("keys not shown: " + " ".join(missing))
if unknown: errors.append("unknown keys: " + " ".join(unknown))
if [k for k in shown_cfg if k not in keys]: errors.append("unknown commented keys")
if not grace < stop: errors.append(f"grace {grace} is not below TimeoutStopSec {stop}")
# a SIGTERM while the ring forms waits for the attempt (connect_timeout, default 60) to end
connect = cfg.get("connect_timeout", 60)
if not connect < stop: errors.append(f"connect_timeout {connect} is not below TimeoutStopSec {stop}")
for e in errors: print("   ", e)
print(f"    {len(keys)} keys shown, {len(cfg)} set, grace {grace} and connect_timeout {connect} < TimeoutStopSec {stop:g}")
sys.exit(1 if errors else 0)
EOF
  ok "ring.toml.example"
else
  bad "ring.toml.example"
fi

echo "== 7. serve knows the unit's flags and the example's keys"
serve_built=0
"$binary" serve --help >"$tmp/serve-help.txt" 2>&1 && serve_built=1
if ((serve_built)); then
  for flag in $(grep -o -- '--[a-z-]*' <<<"$execstart"); do
    if grep -q -- "$flag\b" "$tmp/serve-help.txt"; then ok "serve $flag"; else bad "serve --help has no $flag"; fi
  done
  for key in $(sed -n 's/^#\{0,1\} *\([a-z_]*\) *=.*/\1/p' "$toml" | sort -u); do
    flag="--${key//_/-}"
    if grep -q -- "$flag\b" "$tmp/serve-help.txt"; then ok "key $key = $flag"; else bad "key $key: serve --help has no $flag"; fi
  done
  # Every key at once (uncommented), except that the addresses must be local and free; serve
  # keeps retrying to form a ring it cannot form, so a config it accepts is still running
  # after 2 s, and drains on SIGTERM. (connect_timeout 5: SIGTERM does not cut short an
  # attempt to form the ring, so the drain may take that long.)
  # The hosted model's keys point at stories260K where it is (RINGATTN_MODEL_DIR, else
  # ../shared/models beside the checkout); elsewhere those four keys are left out.
  port=$(free_port)
  models=${RINGATTN_MODEL_DIR:-$repo/../shared/models/stories260K}
  if [[ -f $models/stories260K.bin && -f $models/tok512.bin ]]; then
    model_sed=(-e "s#^(\# ?)?model = .*#model = \"$models/stories260K.bin\"#" -e "s#^(\# ?)?tokenizer = .*#tokenizer = \"$models/tok512.bin\"#"
               -e "s#\"0.0.0.0:8000\"#\"127.0.0.1:$(free_port)\"#" -e "s#^(\# ?)?api_key_file = .*#api_key_file = \"$tmp/all.token\"#")
  else
    echo "  (no model at $models: the model, tokenizer, api and api_key_file keys are left out)"
    model_sed=(-e '/^# ?(model|tokenizer|api|api_key_file) *=/d')
  fi
  sed -E "${model_sed[@]}" -e 's/^# ?([a-z_]+ *=)/\1/' -e "s#\"node0.example:7600\"#\"127.0.0.1:$port\"#" \
    -e 's#"10.0.0.5:7601"#"127.0.0.1"#' -e 's#"node([0-9]).example:7601"#"127.0.0.1:1\1"#g' \
    -e "s#\"0.0.0.0:7700\"#\"127.0.0.1:$(free_port)\"#" -e "s#\"127.0.0.1:9464\"#\"127.0.0.1:$(free_port)\"#" \
    -e 's#^isa = .*#isa = "generic"#' -e 's#^connect_timeout = .*#connect_timeout = 5#' -e "s#^token_file = .*#token_file = \"$tmp/all.token\"#" "$toml" >"$tmp/all.toml"
  (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/all.token")
  "$binary" serve --config "$tmp/all.toml" --log-format text >"$tmp/all.log" 2>&1 &
  spid=$!
  pids+=("$spid")
  sleep 2
  if kill -0 "$spid" 2>/dev/null; then
    kill -TERM "$spid"
    start=$SECONDS
    rc=0
    wait "$spid" || rc=$?
    if ((rc == 0)); then ok "serve accepts the example with all $(grep -c '^[a-z_]* *=' "$tmp/all.toml") keys set (drained: exit 0 in $((SECONDS - start)) s)"
    else bad "serve with every key: exit $rc after SIGTERM"; sed 's/^/    /' "$tmp/all.log"; fi
  else
    rc=0
    wait "$spid" || rc=$?
    bad "serve refused the example with every key set (exit $rc):"
    sed 's/^/    /' "$tmp/all.log"
  fi
else
  echo "  skip: ringattn serve not built"
fi

echo "== 8. the unit's command line, two instances, by hand"
if ((serve_built)); then
  # what systemd would give each instance
  mkdir -p "$tmp/etc" "$tmp/creds"
  (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/creds/token")
  chmod 0400 "$tmp/creds/token"  # LoadCredential's mode
  master_port=$(free_port)
  sed -E -e "s#^master = .*#master = \"127.0.0.1:$master_port\"#" -e 's#^world_size = .*#world_size = 2#' \
    -e 's#^grace = [0-9]+#grace = 5#' -e 's#^log_format = .*#log_format = "text"#' "$toml" >"$tmp/etc/ring.toml"
  declare -A ctl met
  for i in 0 1; do
    ctl[$i]=$(free_port)
    met[$i]=$(free_port)
    printf 'RINGATTN_CONTROL=127.0.0.1:%s\nRINGATTN_METRICS=127.0.0.1:%s\n' "${ctl[$i]}" "${met[$i]}" >"$tmp/etc/rank-$i.env"
  done
  cmdline=${execstart//\/usr\/local\/bin\/ringattn/$binary}
  cmdline=${cmdline//\/etc\/ringattn\/ring.toml/$tmp/etc/ring.toml}
  cmdline=${cmdline//\$\{CREDENTIALS_DIRECTORY\}/$tmp/creds}
  declare -A spids
  for i in 0 1; do
    # shellcheck disable=SC2206  # the unit's command line is split on spaces, like systemd does
    argv=(${cmdline//%i/$i})
    "$python" - "$tmp/notify-$i.sock" >"$tmp/notify-$i.txt" <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
while True:
    print(s.recv(4096).decode(errors="replace").replace("\n", " "), flush=True)
PY
    pids+=($!)
    for ((n = 0; n < 50; n++)); do [[ -S $tmp/notify-$i.sock ]] && break; sleep 0.1; done
    # shellcheck source=/dev/null  # the EnvironmentFile written above
    (set -a && . "$tmp/etc/rank-$i.env" && exec env NOTIFY_SOCKET="$tmp/notify-$i.sock" "${argv[@]}") \
      >"$tmp/instance-$i.log" 2>&1 &
    spids[$i]=$!
    pids+=("${spids[$i]}")
  done
  echo "    ExecStart: ${argv[*]}"
  ready=0
  for ((n = 0; n < 300; n++)); do
    grep -q 'READY=1' "$tmp/notify-0.txt" && grep -q 'READY=1' "$tmp/notify-1.txt" && ready=1 && break
    sleep 0.1
  done
  if ((ready)); then ok "both instances sent READY=1 ($(grep -h -o 'STATUS=[^ ]*[^R]*' "$tmp/notify-0.txt" | head -n 2 | tr '\n' ';'))"
  else bad "READY=1 missing"; sed 's/^/    /' "$tmp"/notify-*.txt "$tmp"/instance-*.log; fi
  for i in 0 1; do
    code=$("$python" -c 'import sys, urllib.request as u
try: print(u.urlopen(sys.argv[1], timeout=5).status)
except Exception as e: print(getattr(e, "code", e))' "http://127.0.0.1:${met[$i]}/healthz")
    if [[ $code == 200 ]]; then ok "ringattn@$i /healthz 200"; else bad "ringattn@$i /healthz $code"; fi
  done
  if "$binary" status --to "127.0.0.1:${ctl[0]}" --token-file "$tmp/creds/token" >"$tmp/status.txt" 2>&1; then
    ok "ringattn status: $(tail -n 1 "$tmp/status.txt")"
  else
    bad "ringattn status"; sed 's/^/    /' "$tmp/status.txt"
  fi
  stop_limit=${stop%s}
  for i in 0 1; do kill -TERM "${spids[$i]}"; done
  for i in 0 1; do
    start=$SECONDS
    rc=0
    timeout "$stop_limit" tail --pid="${spids[$i]}" -f /dev/null || rc=124
    wait "${spids[$i]}" || rc=$?
    if ((rc == 0)) && grep -q 'STOPPING=1' "$tmp/notify-$i.txt"; then
      ok "ringattn@$i: SIGTERM -> STOPPING=1, exit 0 in $((SECONDS - start)) s (TimeoutStopSec $stop)"
    else
      bad "ringattn@$i: exit $rc after SIGTERM"; sed 's/^/    /' "$tmp/notify-$i.txt" "$tmp/instance-$i.log"
    fi
  done
else
  echo "  skip: ringattn serve not built"
fi

echo "test_systemd: $passed passed, $failed failed"
((failed == 0))
