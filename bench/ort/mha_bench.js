#!/usr/bin/env node
// Same-machine baseline: onnxruntime's CPU contrib op com.microsoft
// MultiHeadAttention (fp32, no mask/bias/past => MLAS flash attention),
// timed on ONE intra-op thread. Prints one JSON line per configuration.
//
// Packages (onnxruntime-node, protobufjs) are NOT in this repository; they are
// looked up in $ORT_NODE_DIR/node_modules (default /work/ort-node), then in
// the normal Node resolution path. See README.md beside this file.
'use strict';

const path = require('path');
const { createRequire } = require('module');

// ---------------------------------------------------------------- options
function usage(code) {
  process.stderr.write(
    'usage: node mha_bench.js [--n 4096[,8192..]] [--heads 8] [--head-dim 128]\n' +
      '                         [--reps 5] [--min-seconds 1] [--causal] [--no-check]\n' +
      '                         [--check-only] [--disable-flash] [--verbose]\n' +
      '  --causal         also run the causal (unidirectional=1) variant\n' +
      '  --min-seconds S  keep timing past --reps until S seconds elapsed (0 = exactly --reps)\n' +
      '  --disable-flash  set ORT_DISABLE_FLASH_ATTENTION=1 (forces ORT\'s unfused GEMM+softmax path)\n' +
      '  --verbose        ORT log severity 0 (verbose) for the timed sessions\n');
  process.exit(code);
}

const argv = process.argv.slice(2);
const opt = {
  n: [4096], heads: 8, headDim: 128, reps: 5, minSeconds: 1.0,
  causal: false, check: true, checkOnly: false, disableFlash: false, verbose: false,
};
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  const val = () => {
    if (i + 1 >= argv.length) usage(2);
    return argv[++i];
  };
  const posInt = (s) => {
    const v = Number(s);
    if (!Number.isInteger(v) || v <= 0) { process.stderr.write(`bad value ${s} for ${a}\n`); usage(2); }
    return v;
  };
  switch (a) {
    case '--n': opt.n = val().split(',').filter((s) => s.length).map(posInt); break;
    case '--heads': opt.heads = posInt(val()); break;
    case '--head-dim': opt.headDim = posInt(val()); break;
    case '--reps': opt.reps = posInt(val()); break;
    case '--min-seconds': opt.minSeconds = Number(val()); break;
    case '--causal': opt.causal = true; break;
    case '--no-check': opt.check = false; break;
    case '--check-only': opt.checkOnly = true; break;
    case '--disable-flash': opt.disableFlash = true; break;
    case '--verbose': opt.verbose = true; break;
    case '-h': case '--help': usage(0); break;
    default: process.stderr.write(`unknown option ${a}\n`); usage(2);
  }
}
if (!Number.isFinite(opt.minSeconds) || opt.minSeconds < 0) usage(2);
// Read by the MultiHeadAttention kernel constructor (getenv at session creation).
if (opt.disableFlash) process.env.ORT_DISABLE_FLASH_ATTENTION = '1';

// ---------------------------------------------------------------- packages
function load(name) {
  const dir = process.env.ORT_NODE_DIR || '/work/ort-node';
  try {
    return createRequire(path.join(dir, 'package.json'))(name);
  } catch (e) {
    try {
      return require(name);
    } catch (e2) {
      process.stderr.write(`cannot load ${name} (looked in ${dir}/node_modules and the default path); ` +
        'see bench/ort/README.md for the install commands\n');
      process.exit(3);
    }
  }
}
const ort = load('onnxruntime-node');
const protobuf = load('protobufjs');
const ORT_VERSION = (ort.env && ort.env.versions && ort.env.versions.node) || 'unknown';

// ---------------------------------------------------------------- ONNX ModelProto (subset of onnx.proto)
const onnxRoot = protobuf.Root.fromJSON({
  nested: {
    onnx: {
      nested: {
        AttributeProto: { fields: { name: { type: 'string', id: 1 }, i: { type: 'int64', id: 3 }, type: { type: 'int32', id: 20 } } },
        NodeProto: {
          fields: {
            input: { rule: 'repeated', type: 'string', id: 1 },
            output: { rule: 'repeated', type: 'string', id: 2 },
            name: { type: 'string', id: 3 },
            opType: { type: 'string', id: 4 },
            attribute: { rule: 'repeated', type: 'AttributeProto', id: 5 },
            domain: { type: 'string', id: 7 },
          },
        },
        Dimension: { fields: { dimValue: { type: 'int64', id: 1 } } },
        TensorShapeProto: { fields: { dim: { rule: 'repeated', type: 'Dimension', id: 1 } } },
        TensorTypeProto: { fields: { elemType: { type: 'int32', id: 1 }, shape: { type: 'TensorShapeProto', id: 2 } } },
        TypeProto: { fields: { tensorType: { type: 'TensorTypeProto', id: 1 } } },
        ValueInfoProto: { fields: { name: { type: 'string', id: 1 }, type: { type: 'TypeProto', id: 2 } } },
        GraphProto: {
          fields: {
            node: { rule: 'repeated', type: 'NodeProto', id: 1 },
            name: { type: 'string', id: 2 },
            input: { rule: 'repeated', type: 'ValueInfoProto', id: 11 },
            output: { rule: 'repeated', type: 'ValueInfoProto', id: 12 },
          },
        },
        OperatorSetIdProto: { fields: { domain: { type: 'string', id: 1 }, version: { type: 'int64', id: 2 } } },
        ModelProto: {
          fields: {
            irVersion: { type: 'int64', id: 1 },
            producerName: { type: 'string', id: 2 },
            graph: { type: 'GraphProto', id: 7 },
            opsetImport: { rule: 'repeated', type: 'OperatorSetIdProto', id: 8 },
          },
        },
      },
    },
  },
});
const ModelProto = onnxRoot.lookupType('onnx.ModelProto');

const ATTR_INT = 2;
const ELEM_FLOAT = 1;

function buildModel(n, heads, headDim, causal) {
  const hidden = heads * headDim;
  const vi = (name) => ({
    name,
    type: { tensorType: { elemType: ELEM_FLOAT, shape: { dim: [{ dimValue: 1 }, { dimValue: n }, { dimValue: hidden }] } } },
  });
  const attribute = [{ name: 'num_heads', i: heads, type: ATTR_INT }];
  if (causal) attribute.push({ name: 'unidirectional', i: 1, type: ATTR_INT });
  const model = {
    irVersion: 8,
    producerName: 'ringattn-bench-ort',
    opsetImport: [{ domain: '', version: 17 }, { domain: 'com.microsoft', version: 1 }],
    graph: {
      name: 'mha',
      node: [{
        input: ['query', 'key', 'value'], output: ['output'], name: 'mha0',
        opType: 'MultiHeadAttention', domain: 'com.microsoft', attribute,
      }],
      input: [vi('query'), vi('key'), vi('value')],
      output: [vi('output')],
    },
  };
  const err = ModelProto.verify(model);
  if (err) throw new Error('ModelProto: ' + err);
  return ModelProto.encode(ModelProto.create(model)).finish();
}

// ---------------------------------------------------------------- data
function rng(seed) { // mulberry32
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
function randn(len, seed) {
  const u = rng(seed);
  const out = new Float32Array(len);
  for (let i = 0; i < len; i += 2) {
    const r = Math.sqrt(-2 * Math.log(1 - u()));
    const th = 2 * Math.PI * u();
    out[i] = r * Math.cos(th);
    if (i + 1 < len) out[i + 1] = r * Math.sin(th);
  }
  return out;
}

// float64 reference: per head, softmax(Q K^T / sqrt(D)) V; layout [N, H*D]
function reference(q, k, v, n, heads, d, causal) {
  const hid = heads * d;
  const out = new Float64Array(n * hid);
  const scale = 1 / Math.sqrt(d);
  const s = new Float64Array(n);
  for (let h = 0; h < heads; h++) {
    const o = h * d;
    for (let i = 0; i < n; i++) {
      const jmax = causal ? i : n - 1;
      let m = -Infinity;
      for (let j = 0; j <= jmax; j++) {
        let acc = 0;
        for (let c = 0; c < d; c++) acc += q[i * hid + o + c] * k[j * hid + o + c];
        s[j] = acc * scale;
        if (s[j] > m) m = s[j];
      }
      let z = 0;
      for (let j = 0; j <= jmax; j++) { s[j] = Math.exp(s[j] - m); z += s[j]; }
      for (let c = 0; c < d; c++) {
        let acc = 0;
        for (let j = 0; j <= jmax; j++) acc += s[j] * v[j * hid + o + c];
        out[i * hid + o + c] = acc / z;
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------- ORT
function sessionOptions(verbose) {
  const so = {
    intraOpNumThreads: 1,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  };
  if (verbose) { so.logSeverityLevel = 0; so.logVerbosityLevel = 0; }
  return so;
}

async function makeCase(n, heads, d, causal, verbose, seed) {
  const session = await ort.InferenceSession.create(buildModel(n, heads, d, causal), sessionOptions(verbose));
  const len = n * heads * d;
  const data = { query: randn(len, seed), key: randn(len, seed + 1), value: randn(len, seed + 2) };
  const dims = [1, n, heads * d];
  const feeds = {};
  for (const name of Object.keys(data)) feeds[name] = new ort.Tensor('float32', data[name], dims);
  return { session, data, feeds };
}

async function check(causal) {
  const n = 64, heads = 2, d = 32;
  const { session, data, feeds } = await makeCase(n, heads, d, causal, false, 1234);
  const res = await session.run(feeds);
  const got = res.output.data;
  const want = reference(data.query, data.key, data.value, n, heads, d, causal);
  let maxErr = 0;
  for (let i = 0; i < want.length; i++) {
    const e = Math.abs(got[i] - want[i]);
    if (!(e <= maxErr)) maxErr = e; // NaN propagates as a failure
  }
  if (session.release) await session.release();
  const pass = got.length === want.length && maxErr < 1e-4;
  return { n, heads, d, maxErr, pass };
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : 0.5 * (s[m - 1] + s[m]);
}

async function bench(n, heads, d, causal) {
  const { session, feeds } = await makeCase(n, heads, d, causal, opt.verbose, 42);
  for (let w = 0; w < 2; w++) await session.run(feeds); // warm-up
  const times = [];
  const t0 = process.hrtime.bigint();
  for (;;) {
    const a = process.hrtime.bigint();
    await session.run(feeds);
    const b = process.hrtime.bigint();
    times.push(Number(b - a) / 1e9);
    const elapsed = Number(b - t0) / 1e9;
    if (times.length >= opt.reps && elapsed >= opt.minSeconds) break;
  }
  if (session.release) await session.release();
  const t = median(times);
  const flops = 4 * n * n * heads * d * (causal ? 0.5 : 1);
  return {
    bench: 'ort_mha',
    ort_version: ORT_VERSION,
    n, heads, head_dim: d, causal, threads: 1,
    seconds_median: t,
    seconds_all: times,
    gflops: flops / t / 1e9,
    flash_disabled_env: process.env.ORT_DISABLE_FLASH_ATTENTION === '1',
    command: ['node', ...process.argv.slice(1).map((x, i) => (i === 0 ? path.relative(process.cwd(), x) || x : x))].join(' '),
  };
}

async function main() {
  let causalOk = false;
  if (opt.check || opt.checkOnly || opt.causal) {
    const r = await check(false);
    process.stdout.write(JSON.stringify({
      bench: 'ort_mha_check', ort_version: ORT_VERSION, causal: false,
      n: r.n, heads: r.heads, head_dim: r.d, max_abs_err: r.maxErr, pass: r.pass,
      flash_disabled_env: process.env.ORT_DISABLE_FLASH_ATTENTION === '1',
    }) + '\n');
    if (!r.pass) { process.stderr.write(`correctness check FAILED: max abs err ${r.maxErr}\n`); process.exit(1); }
    if (opt.causal) {
      let rc = null, why = null;
      try { rc = await check(true); } catch (e) { why = String(e && e.message ? e.message : e).split('\n')[0]; }
      causalOk = !!(rc && rc.pass);
      process.stdout.write(JSON.stringify({
        bench: 'ort_mha_check', ort_version: ORT_VERSION, causal: true,
        n: 64, heads: 2, head_dim: 32,
        max_abs_err: rc ? rc.maxErr : null, pass: causalOk, supported: !!rc, error: why,
      }) + '\n');
      if (rc && !rc.pass) {
        process.stderr.write(`causal correctness check FAILED: max abs err ${rc.maxErr}\n`);
        process.exit(1);
      }
    }
  }
  if (opt.checkOnly) return;
  for (const n of opt.n) {
    process.stdout.write(JSON.stringify(await bench(n, opt.heads, opt.headDim, false)) + '\n');
    if (opt.causal && causalOk) process.stdout.write(JSON.stringify(await bench(n, opt.heads, opt.headDim, true)) + '\n');
  }
}

main().catch((e) => { process.stderr.write(String(e && e.stack ? e.stack : e) + '\n'); process.exit(1); });
