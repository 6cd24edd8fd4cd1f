// Oracle from the tokenizers library itself: Hugging Face's Rust code through its node
// binding (npm `tokenizers`, prebuilt; installed by run.sh install-hf), beside transformers.js
// (oracle.mjs), which departs from it where this one is needed: it runs every Split behavior
// but Removed as Isolated.
//
//   node hf_oracle.mjs CACHE encode TOKENIZER.json CORPUS.json OUT.json
//   node hf_oracle.mjs CACHE split CASES.json OUT.json
//
// encode: CORPUS.json as oracle.mjs reads it ([{"name", "hex"}], each text turned into a JS
// string by a replacing UTF-8 decoder that keeps a leading U+FEFF); OUT.json: {"version",
// "results": [{"name", "ids", "ids_special", "decoded_hex"}]}: the ids without and with the
// post-processor's special tokens, and decode(ids) with special tokens kept (the library's
// decoder alone: transformers' clean-up of spaces is not the library's).
// split: CASES.json [{"text", "pattern", "behavior", "invert"}] (behavior as tokenizer.json
// names it); OUT.json {"version", "results": [[piece, ...], ...]}: the Split pre-tokenizer on
// the String pattern, each case's pieces in order.
// Any error: a message on stderr and exit 1.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

function fail(message) {
  process.stderr.write(`hf_oracle.mjs: ${message}\n`);
  process.exit(1);
}

function readJSON(file) {
  try {
    return JSON.parse(fs.readFileSync(file, "utf8"));
  } catch (e) {
    fail(`cannot read ${file} as JSON: ${e.message}`);
  }
}

function write(file, value) {
  try {
    fs.writeFileSync(file, JSON.stringify(value) + "\n");
  } catch (e) {
    fail(`cannot write ${file}: ${e.message}`);
  }
}

async function encode(lib, version, tokenizerFile, corpusFile, outFile) {
  const corpus = readJSON(corpusFile);
  if (!Array.isArray(corpus)) fail(`${corpusFile}: expected a JSON array`);
  let tokenizer;
  try {
    tokenizer = lib.Tokenizer.fromFile(tokenizerFile);
  } catch (e) {
    fail(`${tokenizerFile}: the library refuses it: ${e.message}`);
  }
  const utf8In = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
  const results = [];
  for (const [i, entry] of corpus.entries()) {
    if (entry === null || typeof entry.name !== "string" || typeof entry.hex !== "string" || !/^(?:[0-9a-fA-F]{2})*$/.test(entry.hex))
      fail(`${corpusFile}: entry ${i} is not {"name": string, "hex": even hex digits}`);
    try {
      const text = utf8In.decode(Buffer.from(entry.hex, "hex"));
      const ids = (await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds();
      const ids_special = (await tokenizer.encode(text, null, { addSpecialTokens: true })).getIds();
      const decoded = ids.length === 0 ? "" : await tokenizer.decode(ids, false);
      results.push({ name: entry.name, ids, ids_special, decoded_hex: Buffer.from(decoded, "utf8").toString("hex") });
    } catch (e) {
      fail(`entry "${entry.name}": ${e.stack ?? e}`);
    }
  }
  write(outFile, { version, results });
}

function split(lib, version, casesFile, outFile) {
  const cases = readJSON(casesFile);
  if (!Array.isArray(cases)) fail(`${casesFile}: expected a JSON array`);
  const results = cases.map((c, i) => {
    if (c === null || typeof c.text !== "string" || typeof c.pattern !== "string" || typeof c.behavior !== "string" ||
        typeof c.invert !== "boolean")
      fail(`${casesFile}: case ${i} is not {"text", "pattern", "behavior", "invert"}`);
    // The binding names the behaviors in camel case ("mergedWithPrevious").
    const behavior = c.behavior.charAt(0).toLowerCase() + c.behavior.slice(1);
    try {
      return lib.splitPreTokenizer(c.pattern, behavior, c.invert).preTokenizeString(c.text).map(([piece]) => piece);
    } catch (e) {
      fail(`case ${i}: ${e.message}`);
    }
  });
  write(outFile, { version, results });
}

async function main() {
  const [cache, mode, ...args] = process.argv.slice(2);
  const dir = path.join(cache ?? "", "node_modules", "tokenizers");
  const version = readJSON(path.join(dir, "package.json")).version;
  const lib = createRequire(import.meta.url)(dir);
  if (mode === "encode" && args.length === 3) return encode(lib, version, ...args);
  if (mode === "split" && args.length === 2) return split(lib, version, ...args);
  fail("usage: node hf_oracle.mjs CACHE encode TOKENIZER.json CORPUS.json OUT.json | CACHE split CASES.json OUT.json");
}

main().catch((e) => fail(e.stack ?? String(e)));
