#!/usr/bin/env bash
# ringattn's model runtime against llama.cpp on the same weights, the same token ids and the
# same cores (issue 32's anchor). The seeded model `ringattn generate --model seed:S` draws is
# written as a GGUF file (write_gguf.py: the same numbers); one prompt of token ids (BOS, then
# ids drawn from --seed) goes to both; each prefills it and decodes --tokens greedy tokens:
#   ringattn  P = 1 at 2 threads, and P = 2 at 1 thread a rank (two one-core nodes)
#   llama.cpp 2 threads, and 1 thread (npm's node-llama-cpp, its prebuilt CPU build,
#             installed into /var/cache/ringattn-bench by this script, never into the repo)
# each --repeat times, interleaved; the greedy tokens must be the same everywhere (ringattn's
# up to where it stops at BOS/EOS). Prints a table of medians and writes OUT/runs.jsonl (every
# run) and OUT/summary.json (OUT: bench/results/llamacpp/DTYPE unless --out says).
#   bench/llamacpp/run.sh [--build DIR] [--out DIR] [--repeat N] [--prompt N] [--tokens N] [--dtype f32|bf16|q8_0|q4_k|q6_k|q4_k_m]
#                         [--dim N --layers N --heads N --kv-heads N --head-dim N --ffn N --vocab N --seed S]
# Defaults: issue 32's shape (dim 2048, 4 layers, 32/8 heads of 64, MLP 8192, vocab 512), a
# 2048-token prompt, 32 tokens, 3 repeats, fp32 matrices. bf16: a BF16 GGUF for llama.cpp and
# `--weights-dtype bf16` for ringattn, both rounding the same fp32 numbers to nearest even.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build out= repeat=3 prompt=2048 tokens=32
dim=2048 layers=4 heads=32 kv_heads=8 head_dim=64 ffn=8192 vocab=512 seed=1 dtype=f32
while (($#)); do
  case $1 in
    --build) build=$2 ;; --out) out=$2 ;; --repeat) repeat=$2 ;; --prompt) prompt=$2 ;; --tokens) tokens=$2 ;;
    --dim) dim=$2 ;; --layers) layers=$2 ;; --heads) heads=$2 ;; --kv-heads) kv_heads=$2 ;;
    --head-dim) head_dim=$2 ;; --ffn) ffn=$2 ;; --vocab) vocab=$2 ;; --seed) seed=$2 ;; --dtype) dtype=$2 ;;
    *) echo "run.sh: unknown option '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
  shift 2
done
out=${out:-$root/bench/results/llamacpp/$dtype}
[[ $dtype == f32 || $dtype == bf16 || $dtype == q8_0 || $dtype == q4_k || $dtype == q6_k || $dtype == q4_k_m ]] ||
  { echo "run.sh: --dtype takes f32, bf16, q8_0, q4_k, q6_k or q4_k_m, got '$dtype'" >&2; exit 2; }
for n in repeat prompt tokens dim layers heads kv_heads head_dim ffn vocab seed; do
  [[ ${!n} =~ ^[0-9]+$ ]] || { echo "run.sh: --${n//_/-} must be a non-negative integer, got '${!n}'" >&2; exit 2; }
done
exe=$build/ringattn
[[ -x $exe ]] || { echo "run.sh: $exe is not built (ninja -C $build)" >&2; exit 2; }
py=/usr/bin/python3  # Debian's, with python3-numpy (a pyenv python3 on PATH may lack it)
$py -c 'import numpy' 2>/dev/null || { echo "run.sh: $py has no numpy (apt-get install python3-numpy)" >&2; exit 2; }
command -v node >/dev/null || { echo "run.sh: no node (Node.js >= 20) on PATH" >&2; exit 2; }

cache=/var/cache/ringattn-bench
nlc=$cache/node-llama-cpp
arch=$(uname -m | sed 's/x86_64/x64/; s/aarch64/arm64/')
export NODE_LLAMA_CPP_SKIP_DOWNLOAD=true NODE_LLAMA_CPP_GPU=false NODE_LLAMA_CPP_DIR=$nlc
if [[ ! -f $nlc/node_modules/node-llama-cpp/package.json ]]; then
  echo "run.sh: installing node-llama-cpp 3.22.1 (prebuilt CPU llama.cpp) into $nlc" >&2
  mkdir -p "$nlc"
  npm install --prefix "$nlc" --omit=optional --ignore-scripts --save-exact --no-audit --no-fund \
    node-llama-cpp@3.22.1 "@node-llama-cpp/linux-$arch@3.22.1" >&2
fi

mkdir -p "$cache/models" "$out"
shape="--vocab $vocab --dim $dim --layers $layers --heads $heads --kv-heads $kv_heads --head-dim $head_dim --ffn $ffn"
gguf=$cache/models/seed$seed-v$vocab-d$dim-l$layers-h$heads-kv$kv_heads-hd$head_dim-f$ffn-c$((prompt + tokens + 256))-$dtype.gguf
# f32 and bf16: ringattn draws the seed's weights itself (--weights-dtype rounds them as the
# GGUF writer does); the block formats: ringattn reads the very GGUF file llama.cpp reads.
if [[ $dtype == q* ]]; then model_args=(--model "$gguf"); else model_args=(--model "seed:$seed" $shape --weights-dtype "${dtype/f32/fp32}"); fi
if [[ ! -f $gguf ]]; then
  echo "run.sh: writing $gguf" >&2
  $py "$here/write_gguf.py" --seed "$seed" $shape --context $((prompt + tokens + 256)) --dtype "$dtype" --out "$gguf"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
$py - "$prompt" "$vocab" "$seed" "$work" <<'EOF'
import json, sys
import numpy as np
n, vocab, seed, work = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
ids = [1] + np.random.default_rng(seed).integers(3, vocab, size=n - 1).tolist()  # BOS, then ids past BOS/EOS/<unk>
json.dump(ids, open(f"{work}/ids.json", "w"))
open(f"{work}/prompts.jsonl", "w").write(json.dumps({"id": "bench", "tokens": ids}) + "\n")
EOF

runs=$out/runs.jsonl
: > "$runs"
for ((r = 1; r <= repeat; r++)); do
  for who in "ringattn 1 2" "ringattn 2 1" "llama.cpp 1 2" "llama.cpp 1 1"; do
    read -r impl nodes threads <<< "$who"
    echo "run.sh: [$r/$repeat] $impl P = $nodes, $threads thread(s) each" >&2
    if [[ $impl == ringattn ]]; then
      "$exe" generate "${model_args[@]}" --prompts "$work/prompts.jsonl" --max-tokens "$tokens" \
        --nodes "$nodes" --threads "$threads" --json --quiet > "$work/one.json"
    else
      node "$here/llama_greedy.mjs" --model "$gguf" --prompt "$work/ids.json" --gen "$tokens" --threads "$threads" \
        > "$work/one.json"
    fi
    $py - "$impl" "$nodes" "$threads" "$r" "$work/one.json" >> "$runs" <<'EOF'
import json, sys
impl, nodes, threads, rep, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
j = json.load(open(path))
if impl == "ringattn":
    ranks = j["ranks"]  # memory: the largest rank's peak against its weights + K/V cache
    top = max(ranks, key=lambda r: r["peak_rss_bytes"])
    row = dict(prefill_tokens_per_s=j["prefill_tokens_per_s"], decode_tokens_per_s=j["decode_tokens_per_s"],
               prefill_seconds=j["prefill_seconds"], decode_seconds=j["decode_seconds"], tokens=j["results"][0]["tokens"],
               peak_rss_bytes=top["peak_rss_bytes"], weight_bytes=top["weight_bytes"], kv_cache_bytes=top["kv_cache_bytes"],
               rss_over_weights_and_cache=top["peak_rss_bytes"] / (top["weight_bytes"] + top["kv_cache_bytes"]))
else:
    row = dict(prefill_tokens_per_s=j["prefill_tokens_per_s"], decode_tokens_per_s=j["decode_tokens_per_s"],
               prefill_seconds=j["prefill_seconds"], decode_seconds=j["decode_seconds"], tokens=j["tokens"],
               llama_cpp=j["llama_cpp"]["release"], node_llama_cpp=j["node_llama_cpp"],
               cpu_features=j["llama_cpp"]["system_info"])
print(json.dumps(dict(impl=impl, nodes=nodes, threads=threads, repeat=rep, **row)))
EOF
  done
done

$py - "$runs" "$out/summary.json" "$prompt" "$tokens" "${exe#$root/} generate ${model_args[*]}" <<'EOF'
import json, statistics, subprocess, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
def med(impl, nodes, threads, key):
    return statistics.median(r[key] for r in runs if (r["impl"], r["nodes"], r["threads"]) == (impl, nodes, threads))
ref = next(r["tokens"] for r in runs if r["impl"] == "llama.cpp")
agree = True
for r in runs:
    n = min(len(r["tokens"]), len(ref))
    if r["tokens"][:n] != ref[:n] or n == 0:
        agree = False
        print(f"run.sh: {r['impl']} P = {r['nodes']} x {r['threads']} thread(s), repeat {r['repeat']}: greedy tokens "
              f"{r['tokens'][:n]} differ from llama.cpp's {ref[:n]}", file=sys.stderr)
cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p'; grep -m1 'cpu family' /proc/cpuinfo; "
                      "grep -m1 '^model\\s' /proc/cpuinfo; nproc"], capture_output=True, text=True).stdout.split("\n")
s = dict(machine=f"{cpu[0]} (family {cpu[1].split(':')[-1].strip()}, model {cpu[2].split(':')[-1].strip()}), {cpu[3]} CPUs",
         prompt_tokens=int(sys.argv[3]), generated=int(sys.argv[4]), command=sys.argv[5],
         llama_cpp=next(r["llama_cpp"] for r in runs if r["impl"] == "llama.cpp"),
         node_llama_cpp=next(r["node_llama_cpp"] for r in runs if r["impl"] == "llama.cpp"),
         greedy_tokens_agree=agree, repeats=max(r["repeat"] for r in runs))
for key in ("prefill_tokens_per_s", "decode_tokens_per_s"):
    s[key] = {f"{i} P={n} x{t}": med(i, n, t, key)
              for i, n, t in (("ringattn", 1, 2), ("ringattn", 2, 1), ("llama.cpp", 1, 2), ("llama.cpp", 1, 1))}
s["ringattn_peak_rss_over_weights_and_cache"] = {
    f"P={n} x{t}": max(r["rss_over_weights_and_cache"] for r in runs if (r["impl"], r["nodes"], r["threads"]) == ("ringattn", n, t))
    for n, t in ((1, 2), (2, 1))}
p, d = s["prefill_tokens_per_s"], s["decode_tokens_per_s"]
s["ratios"] = {"prefill P=1 x2 / llama.cpp x2": p["ringattn P=1 x2"] / p["llama.cpp P=1 x2"],
               "prefill P=2 x1 / llama.cpp x1": p["ringattn P=2 x1"] / p["llama.cpp P=1 x1"],
               "decode P=1 x2 / llama.cpp x2": d["ringattn P=1 x2"] / d["llama.cpp P=1 x2"],
               "decode P=2 x1 / llama.cpp x1": d["ringattn P=2 x1"] / d["llama.cpp P=1 x1"]}
json.dump(s, open(sys.argv[2], "w"), indent=1)
print(f"{s['machine']}; {s['prompt_tokens']}-token prompt, {s['generated']} greedy tokens, medians of {s['repeats']}")
print(f"{'':24} {'prefill tok/s':>14} {'decode tok/s':>13}")
for k in p:
    print(f"{k:24} {p[k]:14.1f} {d[k]:13.1f}")
for k, v in s["ratios"].items():
    print(f"{k:32} {v:5.2f}")
for k, v in s["ringattn_peak_rss_over_weights_and_cache"].items():
    print(f"ringattn {k} peak RSS / (weights + KV cache) {v:5.3f} (the largest of its runs and ranks)")
print("greedy tokens agree" if agree else "greedy tokens DIFFER")
sys.exit(0 if agree else 1)
EOF
