// llama.cpp's answer to bench/serve/serving.py's arrivals: one context with a sequence per
// request (node-llama-cpp's multi-sequence context; its batcher puts every sequence's pending
// tokens, prompt chunks and decode steps alike, into one llama_decode of up to --batch
// tokens), each request started at its arrival time on a sequence of its own, greedy, its
// tokens timed as they are yielded. node-llama-cpp as bench/llamacpp/ installs it (prebuilt
// CPU build, outside the tree; NODE_LLAMA_CPP_DIR).
//
//   node serving_llamacpp.mjs --model M.gguf --requests requests.json --threads 2 [--batch 512]
//
// requests.json: [{"id", "arrival_s", "tokens" (BOS included, fed verbatim), "max_tokens"}].
// A reply ends after max_tokens or at an end-of-generation token (as the endpoint's do).
// Prints one JSON object a line: a "ready" line once the model and context are loaded, then
// one per request as it ends ({id, sent_s, token_s: each token's time since sent, tokens}),
// then a summary line with llama.cpp's release and the context's settings.
import {createRequire} from "node:module";
import fs from "node:fs";
import path from "node:path";

const NLC_DIR = process.env.NODE_LLAMA_CPP_DIR ?? "/var/cache/ringattn-bench/node-llama-cpp";
const require = createRequire(path.join(NLC_DIR, "package.json"));
const {getLlama, LlamaLogLevel} = await import(require.resolve("node-llama-cpp"));

const args = {threads: 2, batch: 512};
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i += 2) args[argv[i].replace(/^--/, "")] = argv[i + 1];
if (!args.model || !args.requests) throw new Error("need --model and --requests");
const requests = JSON.parse(fs.readFileSync(args.requests, "utf8"));
const threads = Number(args.threads);

const llama = await getLlama({
    gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true, progressLogs: false,
    maxThreads: threads, logLevel: LlamaLogLevel.warn, logger: () => {},
});
const model = await llama.loadModel({modelPath: args.model, gpuLayers: 0});
const longest = Math.max(...requests.map((r) => r.tokens.length + r.max_tokens)) + 1;
const context = await model.createContext({
    contextSize: longest,            // per sequence (node-llama-cpp gives each sequence its own cells)
    sequences: requests.length,      // every request has a sequence the moment it arrives
    batchSize: Number(args.batch),
    threads: {ideal: threads, min: threads},
    ignoreMemorySafetyChecks: true,
});
const sequences = requests.map(() => context.getSequence());
const emit = (o) => process.stdout.write(JSON.stringify(o) + "\n");
emit({ready: true});

const t0 = performance.now();
const now = () => (performance.now() - t0) / 1e3;
const sleep = (s) => new Promise((r) => setTimeout(r, Math.max(0, s * 1e3)));

async function serve(r, seq) {
    await sleep(r.arrival_s - now());
    const sent = now();
    const times = [], tokens = [];
    for await (const token of seq.evaluate(r.tokens, {temperature: 0})) {
        times.push(now() - sent);
        tokens.push(token);
        if (tokens.length >= r.max_tokens) break;
    }
    emit({id: r.id, sent_s: sent, token_s: times, tokens});
}

await Promise.all(requests.map((r, i) => serve(r, sequences[i])));
emit({
    summary: true, makespan_s: now(), threads: context.currentThreads, batch_size: context.batchSize,
    context_size_per_sequence: context.contextSize, sequences: requests.length, flash_attention: context.flashAttention,
    llama_cpp: llama.llamaCppRelease, system_info: llama.systemInfo,
    node_llama_cpp: JSON.parse(fs.readFileSync(path.join(NLC_DIR, "node_modules/node-llama-cpp/package.json"), "utf8")).version,
});
await context.dispose();
await model.dispose();
await llama.dispose();
