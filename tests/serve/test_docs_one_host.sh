#!/usr/bin/env bash
# docs/daemons.md's two daemons on one host, run as written: the block under its
# "docs-test:one-host" marker, in a network namespace of its own (so that its fixed ports
# are free and nothing outside can reach them), from a folder with the model files and a
# token. Both daemons must start (the second finds the default metrics port taken and
# serves on another), share the host's cores, form the ring, and answer a completion with
# llama2.c's text.
#   test_docs_one_host.sh RINGATTN DOCS_MD
# Exit 77 (skipped) without root, network namespaces or the model files; with CI=true
# those fail instead.
set -uo pipefail
RA=$1
DOC=$2
# shellcheck source=tests/skip.sh
source "$(dirname "$0")/../skip.sh"
model=${RINGATTN_MODEL_DIR:-$(dirname "$DOC")/../../shared/models/stories260K}
[[ -f $model/stories260K.bin && -f $model/tok512.bin ]] || skip "no model at $model (set RINGATTN_MODEL_DIR)"
[[ $(id -u) -eq 0 ]] && command -v ip >/dev/null || skip "needs root and ip (iproute2)"
ns="radocs$$"
ip netns add "$ns" 2>/dev/null || skip "cannot create network namespaces here"
work=$(mktemp -d)
cleanup() {
  ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
  sleep 0.2
  ip netns del "$ns" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAILED: $1"
  for f in "$work"/out.log; do [[ -f $f ]] && tail -n 30 "$f"; done
  exit 1
}
ip netns exec "$ns" ip link set lo up

block=$(awk '/<!-- docs-test:one-host/ {on = 1; next} on && /^```/ {if (inside) exit; inside = 1; next} inside {print}' "$DOC")
[[ -n $block ]] || fail "no block under 'docs-test:one-host' in $DOC"
ln -s "$(realpath "$model/stories260K.bin")" "$work/stories260K.bin"
ln -s "$(realpath "$model/tok512.bin")" "$work/tok512.bin"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/token"
chmod 600 "$work/token"
mkdir "$work/bin"
ln -s "$(realpath "$RA")" "$work/bin/ringattn"
# The block as a user pastes it: a shell in the folder, ringattn on the PATH.
(cd "$work" && PATH="$work/bin:$PATH" ip netns exec "$ns" bash -c "$block" >"$work/out.log" 2>&1)
in_ns() { ip netns exec "$ns" "$@"; }

ready=false
for _ in $(seq 1 300); do
  if in_ns curl -sf http://127.0.0.1:9464/healthz >/dev/null 2>&1; then ready=true; break; fi
  sleep 0.2
done
$ready || fail "rank 0's /healthz on 127.0.0.1:9464 never said ok"
grep -q "instead (--metrics sets the address)" "$work/out.log" || fail "the second daemon did not report its own metrics port"
port=$(grep -o "/metrics and /healthz on 127.0.0.1:[0-9]*" "$work/out.log" | head -n 1 | grep -o "[0-9]*$")
[[ -n $port ]] && in_ns curl -sf "http://127.0.0.1:$port/healthz" >/dev/null || fail "rank 1's /healthz on port '$port' did not answer"
cores=$(nproc)
want=$(( cores / 2 > 0 ? cores / 2 : 1 ))
n=$(grep -c "; $want kernel threads ($cores cores / 2 daemons of the ring on this host" "$work/out.log")
[[ $n -eq 2 ]] || fail "expected both daemons to log $want kernel threads ($cores cores / 2 daemons), saw $n"
out=$(in_ns curl -s --max-time 60 http://127.0.0.1:8000/v1/completions -H "Authorization: Bearer $(cat "$work/token")" \
  -H "Content-Type: application/json" -d '{"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0}')
case $out in
  *'"text":", there was a little girl named Lily. She"'*) ;;
  *) fail "unexpected completion: $out" ;;
esac
echo "test_docs_one_host: docs/daemons.md's one-host block runs as written (both daemons up, $want thread(s) each, rank 1's metrics on port $port, llama2.c's text)"
