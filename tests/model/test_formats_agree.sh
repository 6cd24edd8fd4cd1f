#!/usr/bin/env bash
# The same weights in three formats give the same greedy text (issue 33): the real
# stories260K as llama2.c's checkpoint, converted by tools/convert_llama2c.py into a Hugging
# Face directory (F32 safetensors, q/k rows in rotate-half order) and a GGUF F32 file (q/k
# rows interleaved, llama.cpp's order), three text prompts (tok512.bin), 200 greedy tokens
# each, at P = 1, 2 and 3: all nine runs give llama2.c's file's tokens and text exactly.
# Also: a truncated checkpoint is refused by the converter, which leaves no output.
#   test_formats_agree.sh RINGATTN SOURCE_ROOT
# Exit 77 (skipped) without the model files or python3-numpy; with CI=true those fail.
set -uo pipefail
RA=$1
ROOT=$2
# shellcheck source=tests/skip.sh
source "$(dirname "$0")/../skip.sh"
py=/usr/bin/python3  # Debian's, with python3-numpy
$py -c 'import numpy' 2>/dev/null || skip "no python3-numpy for $py"
model=${RINGATTN_MODEL_DIR:-$ROOT/../shared/models/stories260K}
[[ -f $model/stories260K.bin && -f $model/tok512.bin ]] || skip "no model at $model (set RINGATTN_MODEL_DIR)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

$py "$ROOT/tools/convert_llama2c.py" "$model/stories260K.bin" --hf "$work/hf" --gguf "$work/stories260K.gguf" ||
  { echo "FAILED: convert_llama2c.py"; exit 1; }
head -c 100000 "$model/stories260K.bin" > "$work/short.bin"
if $py "$ROOT/tools/convert_llama2c.py" "$work/short.bin" --gguf "$work/short.gguf" 2> "$work/short.err"; then
  echo "FAILED: a truncated checkpoint was converted"; exit 1
fi
grep -q "100000 bytes, but its header needs" "$work/short.err" || { echo "FAILED: refusal: $(cat "$work/short.err")"; exit 1; }
[[ ! -e $work/short.gguf && ! -e $work/short.gguf.partial ]] || { echo "FAILED: a refused conversion left a file"; exit 1; }

printf '%s\n' '{"id": "a", "text": "Once upon a time"}' '{"id": "b", "text": "Lily and Tom went to the park. They"}' \
  '{"id": "c", "text": "The little dog was sad because"}' > "$work/prompts.jsonl"
failed=0
for m in "llama2c $model/stories260K.bin" "hf $work/hf" "gguf $work/stories260K.gguf"; do
  read -r name path <<< "$m"
  for p in 1 2 3; do
    timeout 120 "$RA" generate --model "$path" --tokenizer "$model/tok512.bin" --prompts "$work/prompts.jsonl" \
      --max-tokens 200 --nodes "$p" --threads 1 --json --quiet > "$work/$name-p$p.json" 2> "$work/$name-p$p.err" ||
      { echo "FAILED: generate --model $name at P = $p: $(tail -n 3 "$work/$name-p$p.err")"; failed=1; }
  done
done
((failed)) && exit 1
$py - "$work" <<'EOF'
import json, sys
work = sys.argv[1]
def runs(name, p):
    return {r["id"]: (r["tokens"], r["text"]) for r in json.load(open(f"{work}/{name}-p{p}.json"))["results"]}
want = runs("llama2c", 1)
bad = 0
for name in ("llama2c", "hf", "gguf"):
    for p in (1, 2, 3):
        got = runs(name, p)
        for pid, (tokens, text) in want.items():
            if got.get(pid) != (tokens, text):
                g = got.get(pid, ([], ""))
                k = next((i for i, (a, b) in enumerate(zip(g[0], tokens)) if a != b), min(len(g[0]), len(tokens)))
                print(f"FAILED: {name} at P = {p}, prompt {pid}: parts from llama2.c's file at token {k}: {g[1]!r}")
                bad += 1
for pid, (tokens, text) in sorted(want.items()):
    print(f"prompt {pid}: {len(tokens)} tokens, equal in all 9 runs: {text[:60]!r}...")
sys.exit(1 if bad else 0)
EOF
