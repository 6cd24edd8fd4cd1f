// Oracle for GGUF vocabularies: llama.cpp itself (npm node-llama-cpp, its prebuilt CPU build)
// loads a GGUF file's vocabulary only and tokenizes every corpus entry.
//
//   node gguf_oracle.mjs NODE_LLAMA_CPP_DIR MODEL.gguf CORPUS.json OUT.json
//
// CORPUS.json as for oracle.mjs ([{"name", "hex"}], raw bytes, read with a replacing UTF-8
// decoder that keeps a leading BOM). For each entry: `ids` = llama_tokenize with special
// tokens parsed in the text and nothing added (node-llama-cpp's model.tokenize(text, true)),
// `decoded_hex` = the UTF-8 bytes of detokenize(ids, true) (special tokens as their text).
// OUT.json: {"llama_cpp", "results": [{"name", "ids", "decoded_hex"}]}. Errors: stderr, exit 1.
import fs from "node:fs";
import path from "node:path";
import {createRequire} from "node:module";

function fail(message) {
  process.stderr.write(`gguf_oracle.mjs: ${message}\n`);
  process.exit(1);
}

const [dir, modelPath, corpusFile, outFile] = process.argv.slice(2);
if (outFile === undefined) fail("usage: node gguf_oracle.mjs NODE_LLAMA_CPP_DIR MODEL.gguf CORPUS.json OUT.json");
const require = createRequire(path.join(dir, "package.json"));
const {getLlama, LlamaLogLevel} = await import(require.resolve("node-llama-cpp"));
const corpus = JSON.parse(fs.readFileSync(corpusFile, "utf8"));
const llama = await getLlama({gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true,
                              progressLogs: false, logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, gpuLayers: 0, vocabOnly: true});
const utf8In = new TextDecoder("utf-8", {fatal: false, ignoreBOM: true});
const results = corpus.map(({name, hex}) => {
  const text = utf8In.decode(Buffer.from(hex, "hex"));
  const ids = Array.from(model.tokenize(text, true));
  const decoded = ids.length === 0 ? "" : model.detokenize(ids, true);
  return {name, ids, decoded_hex: Buffer.from(new TextEncoder().encode(decoded)).toString("hex")};
});
fs.writeFileSync(outFile, JSON.stringify({llama_cpp: llama.llamaCppRelease?.release ?? null, results}) + "\n");
await model.dispose();
await llama.dispose();
