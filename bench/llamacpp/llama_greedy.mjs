// llama.cpp on a GGUF file, greedy, from token ids: the anchor bench/llamacpp/run.sh times
// ringattn against and the oracle its greedy tokens must equal. llama.cpp is npm's
// node-llama-cpp (its prebuilt CPU binaries; run.sh installs it into /var/cache, never here).
//
//   NODE_LLAMA_CPP_SKIP_DOWNLOAD=true NODE_LLAMA_CPP_GPU=false \
//   node llama_greedy.mjs --model M.gguf --prompt prompt.json[,prompt2.json...] --gen 32 --threads 2 \
//        [--flash auto|on|off] [--logits] [--margins] [--mmap auto|on|off] [--kv f16|f32|bf16] [--log warn|info|debug]
//
// prompt.json: a JSON array of token ids, fed verbatim (no BOS added). The whole prompt is one
// batch (one llama_decode), then one call per generated token, each the argmax (temperature
// 0). Prints one JSON object on stdout: seconds and tokens/s of each phase, the tokens, and
// llama.cpp's release and CPU features. Several prompts (comma-separated) run one after the
// other on the model loaded once, each in a context of its own as if run alone: one JSON
// object a line, in their order (the tests' oracle: a process and a model load per prompt
// was most of its time). --margins adds, for every generated token, its logit
// less the runner-up's and the spread of that step's logits (max - min): how near a tie each
// greedy choice was (the tests' oracle uses it; it slows decode).
import {createRequire} from "node:module";
import fs from "node:fs";
import path from "node:path";

const NLC_DIR = process.env.NODE_LLAMA_CPP_DIR ?? "/var/cache/ringattn-bench/node-llama-cpp";
const require = createRequire(path.join(NLC_DIR, "package.json"));
const {getLlama, LlamaLogLevel} = await import(require.resolve("node-llama-cpp"));

function parseArgs(argv) {
    const a = {gen: 32, threads: 2, flash: "auto", logits: false, margins: false, mmap: "auto", kv: "F16", log: "warn"};
    for (let i = 0; i < argv.length; i++) {
        const k = argv[i].replace(/^--/, "");
        if (k === "logits") a.logits = true;
        else if (k === "margins") a.margins = true;
        else a[k] = argv[++i];
    }
    a.gen = Number(a.gen);
    a.threads = Number(a.threads);
    if (!a.model || !a.prompt) throw new Error("need --model and --prompt");
    return a;
}
const tri = (v) => (v === "auto" ? "auto" : v === "on" || v === "true");

const args = parseArgs(process.argv.slice(2));
const prompts = args.prompt.split(",").map((f) => JSON.parse(fs.readFileSync(f, "utf8")).map(Number));
const greedy = {temperature: 0};
const logs = [];

const tLoad0 = performance.now();
const llama = await getLlama({
    gpu: false,                 // CPU only; never probe cuda/vulkan
    build: "never",             // never compile llama.cpp from source
    usePrebuiltBinaries: true,
    skipDownload: true,         // never download llama.cpp source from GitHub
    progressLogs: false,
    maxThreads: args.threads,
    logLevel: LlamaLogLevel[args.log],
    logger: (level, msg) => logs.push(`${level}: ${msg.trimEnd()}`),
});
const model = await llama.loadModel({
    modelPath: args.model,
    gpuLayers: 0,
    useMmap: tri(args.mmap),
});
const modelSeconds = (performance.now() - tLoad0) / 1e3;

async function run(prompt, first) {
const tContext0 = performance.now();
const need = prompt.length + args.gen + 1;
const context = await model.createContext({
    contextSize: need,           // rounded up internally (padding to 256)
    batchSize: prompt.length,    // whole prompt in one llama_decode (n_ubatch = n_batch)
    sequences: 1,
    threads: {ideal: args.threads, min: args.threads},
    flashAttention: tri(args.flash),
    ignoreMemorySafetyChecks: true,
    experimentalKvCacheKeyType: args.kv.toUpperCase(),   // llama.cpp default: F16
    experimentalKvCacheValueType: args.kv.toUpperCase(),
});
const seq = context.getSequence();
const loadSeconds = (first ? modelSeconds : 0) + (performance.now() - tContext0) / 1e3;

// Prefill: all prompt tokens in one batch; only the last one requests output (logits).
const items = prompt.map((t, i) => (i === prompt.length - 1
    ? [t, {generateNext: {token: true, logits: args.logits || args.margins, options: greedy}}]
    : t));
const t0 = performance.now();
const res = await seq.controlledEvaluate(items);
const t1 = performance.now();
const last = res[prompt.length - 1];
const out = [last.next.token];
// A step's logits (a Map token -> value): the chosen token's lead over the runner-up, and the spread.
const margins = [];
function margin(logits) {
    let best = -Infinity, second = -Infinity, lo = Infinity;
    for (const v of logits.values()) {
        if (v > best) [best, second] = [v, best];
        else if (v > second) second = v;
        lo = Math.min(lo, v);
    }
    margins.push({lead: best - second, spread: best - lo});
}
if (args.margins) margin(last.next.logits);
let lastLogits = null;
if (args.logits && last.next.logits) {
    lastLogits = [];
    for (const [tok, v] of last.next.logits) lastLogits[tok] = v;
}

// Decode: feed each greedy token back, one token per llama_decode.
const t2 = performance.now();
while (out.length < args.gen) {
    const r = await seq.controlledEvaluate([[out[out.length - 1],
        {generateNext: {token: true, logits: args.margins, options: greedy}}]]);
    out.push(r[0].next.token);
    if (args.margins) margin(r[0].next.logits);
}
const t3 = performance.now();

const prefillS = (t1 - t0) / 1e3, decodeS = (t3 - t2) / 1e3;
const nDecoded = args.gen - 1; // first generated token comes from the prefill logits
console.log(JSON.stringify({
    model: path.resolve(args.model),
    n_prompt: prompt.length,
    n_gen: out.length,
    threads: context.currentThreads,
    context_size: context.contextSize,
    batch_size: context.batchSize,
    flash_attention: context.flashAttention,
    kv_cache_type: [context.kvCacheKeyType, context.kvCacheValueType],
    load_seconds: +loadSeconds.toFixed(3),
    prefill_seconds: +prefillS.toFixed(4),
    prefill_tokens_per_s: +(prompt.length / prefillS).toFixed(2),
    decode_seconds: +decodeS.toFixed(4),
    decode_tokens: nDecoded,
    decode_tokens_per_s: +(nDecoded / decodeS).toFixed(2),
    tokens: out,
    last_prompt_logits: lastLogits,
    margins: args.margins ? margins : undefined,
    llama_cpp: {
        release: llama.llamaCppRelease,
        build_type: llama.buildType,
        gpu: llama.gpu,
        system_info: llama.systemInfo,
        cpu_math_cores: llama.cpuMathCores,
        supports_mmap: llama.supportsMmap,
    },
    node_llama_cpp: JSON.parse(fs.readFileSync(path.join(NLC_DIR, "node_modules/node-llama-cpp/package.json"), "utf8")).version,
    node: process.version,
    logs,
}));
await context.dispose();
}

for (let i = 0; i < prompts.length; i++) await run(prompts[i], i === 0);
await model.dispose();
await llama.dispose();
