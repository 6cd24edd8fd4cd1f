// The official OpenAI Node client (npm `openai`) against the daemons' endpoint, as a user's
// program calls it; tests/serve/test_openai_client.cpp runs it through run.sh:
//
//   node client_test.mjs CACHE BASE_URL KEY MODEL METRICS_URL EXPECTED
//
// EXPECTED is llama2.c's greedy text after "Once upon a time" (60 tokens). Prints one JSON
// object: {"checks": [{"name", "ok", "detail"}], "statuses": {"200": n, ...} (every answer
// the endpoint gave this script, by HTTP status), "generations": n (completions answered
// 200)}. Exit 0 once the report is printed, whatever the checks say: the caller asserts.
import http from 'node:http';
import { createRequire } from 'node:module';

import { check, checks, errorOf, section } from './report.mjs';

const [cache, base, key, model, metricsUrl, expected] = process.argv.slice(2);
const OpenAI = createRequire(cache + '/package.json')('openai');

// Every client request on one keep-alive connection: an answer that left the request's
// body unread would break the next request on it.
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
const options = { baseURL: base + '/v1', maxRetries: 0, timeout: 120000, httpAgent: agent };
const client = new OpenAI({ apiKey: key, ...options });
const wrongKey = new OpenAI({ apiKey: 'not-the-daemon-key', ...options });

const statuses = {};
let generations = 0;
const prompt = 'Once upon a time';
const messages = [{ role: 'user', content: prompt }];

function counted(status) {
  statuses[status] = (statuses[status] || 0) + 1;
}

// One request through the client: {r} (its result; a stream read to the end into its
// chunks) or {e} (the APIError the client threw); its HTTP status counted either way.
async function call(fn, generation = true) {
  try {
    let r = await fn();
    counted(200);
    if (generation) ++generations;
    if (r && typeof r[Symbol.asyncIterator] === 'function') {
      const chunks = [];
      for await (const c of r) chunks.push(c);
      r = chunks;
    }
    return { r };
  } catch (e) {
    if (e instanceof OpenAI.APIError && e.status) {
      counted(e.status);
      return { e };
    }
    throw e;
  }
}

// A request without the client (no key, a path the client has no method for).
async function raw(method, path, headers, body) {
  const res = await fetch(base + path, { method, headers, body });
  counted(res.status);
  return { status: res.status, body: await res.json() };
}

async function metric(series) {
  const text = await (await fetch(metricsUrl)).text();
  for (const line of text.split('\n')) if (line.startsWith(series + ' ')) return Number(line.slice(series.length + 1));
  return 0;
}

async function until(pred, ms) {
  for (const end = Date.now() + ms; Date.now() < end; await new Promise((r) => setTimeout(r, 100))) if (await pred()) return true;
  return pred();
}

const textOf = (chunks) => chunks.map((c) => c.choices[0]?.text ?? c.choices[0]?.delta?.content ?? '').join('');
const finishOf = (chunks) => chunks.map((c) => c.choices[0]?.finish_reason).filter(Boolean);
const upToFirst = (s) => expected.slice(0, expected.indexOf(s));

await section('models', async () => {
  const { r } = await call(() => client.models.list(), false);  // a page: read to its end, its models
  check('models.list names the hosted model', r && r.length === 1 && r[0].id === model, r);
  const one = await call(() => client.models.retrieve(model), false);
  check('models.retrieve(the hosted model)', one.r && one.r.id === model, one.r);
  const none = await call(() => client.models.retrieve('gpt-4o-nonexistent'), false);
  check('models.retrieve(unknown) is NotFoundError model_not_found',
    none.e instanceof OpenAI.NotFoundError && none.e.code === 'model_not_found', errorOf(none));
});

// First of all generations, so that the decode counter holds this request's tokens alone.
await section('stop ends the generation on the ring', async () => {
  const series = { decode: 'ringattn_generated_tokens_total{phase="decode"}', ok: 'ringattn_generations_total{result="ok"}',
    cancelled: 'ringattn_generations_total{result="cancelled"}' };
  const before = { decode: await metric(series.decode), ok: await metric(series.ok), cancelled: await metric(series.cancelled) };
  const { r, e } = await call(() => client.completions.create({ model, prompt, max_tokens: 400, temperature: 0, stop: '.' }));
  check('stop ".": the text up to the first "."', r && r.choices[0].text === upToFirst('.') && r.choices[0].finish_reason === 'stop', r || errorOf({ e }));
  await until(async () => (await metric(series.decode)) !== before.decode, 20000);
  const decoded = (await metric(series.decode)) - before.decode;
  // 11 tokens reach the "."; a ring that went on would decode up to 400.
  check('stop: the ring stopped decoding it (not 400 tokens)', decoded >= 11 && decoded < 40, { decoded });
  check('stop: counted as a whole reply, not cancelled',
    (await until(async () => (await metric(series.ok)) === before.ok + 1, 10000)) && (await metric(series.cancelled)) === before.cancelled,
    { ok: await metric(series.ok), cancelled: await metric(series.cancelled), before });
});

await section('completions and chat', async () => {
  const c = await call(() => client.completions.create({ model, prompt, max_tokens: 60, temperature: 0 }));
  check('completion: llama2.c\'s text', c.r && c.r.choices[0].text === expected && c.r.choices[0].finish_reason === 'length', c.r || errorOf(c));
  check('completion: usage in a whole response', c.r && c.r.usage && c.r.usage.prompt_tokens === 5 && c.r.usage.completion_tokens === 60 &&
    c.r.usage.total_tokens === 65, c.r && c.r.usage);
  const nomodel = await call(() => client.completions.create({ prompt, max_tokens: 60, temperature: 0 }));
  check('completion without a model: the hosted one answers', nomodel.r && nomodel.r.choices[0].text === expected && nomodel.r.model === model,
    nomodel.r || errorOf(nomodel));
  const chat = await call(() => client.chat.completions.create({ model, messages, max_tokens: 60, temperature: 0 }));
  check('chat: llama2.c\'s text', chat.r && chat.r.choices[0].message.content === expected, chat.r || errorOf(chat));
  const one = await call(() => client.completions.create({ model, prompt: [prompt], max_tokens: 60, temperature: 0 }));
  check('prompt ["text"]: that text\'s completion', one.r && one.r.choices[0].text === expected, one.r || errorOf(one));
});

await section('streams', async () => {
  const s = await call(() => client.completions.create({ model, prompt, max_tokens: 60, temperature: 0, stream: true }));
  check('stream: llama2.c\'s text', s.r && textOf(s.r) === expected, s.r ? textOf(s.r) : errorOf(s));
  check('stream without include_usage: no usage in any chunk', s.r && s.r.every((c) => !('usage' in c)), s.r && s.r.filter((c) => 'usage' in c));
  const chat = await call(() => client.chat.completions.create({ model, messages, max_tokens: 60, temperature: 0, stream: true }));
  check('chat stream: llama2.c\'s text, no usage', chat.r && textOf(chat.r) === expected && chat.r.every((c) => !('usage' in c)),
    chat.r ? textOf(chat.r) : errorOf(chat));
  for (const [name, create] of [['completion', (o) => client.completions.create({ prompt, ...o })],
    ['chat', (o) => client.chat.completions.create({ messages, ...o })]]) {
    const u = await call(() => create({ model, max_tokens: 60, temperature: 0, stream: true, stream_options: { include_usage: true } }));
    const last = u.r && u.r[u.r.length - 1];
    check(name + ' include_usage: one last chunk with no choices and the usage',
      last && last.choices.length === 0 && last.usage && last.usage.prompt_tokens === 5 && last.usage.completion_tokens === 60 &&
      last.usage.total_tokens === 65, last || errorOf(u));
    check(name + ' include_usage: every other chunk has "usage": null and one choice',
      u.r && u.r.slice(0, -1).every((c) => c.usage === null && c.choices.length === 1), u.r && u.r.slice(0, -1).filter((c) => c.usage !== null));
    check(name + ' include_usage: the text unchanged', u.r && textOf(u.r) === expected, u.r && textOf(u.r));
  }
});

await section('responses', async () => {
  // POST /v1/responses: the same reply as the chat it converts to (a llama2.c model's chat is
  // its messages' text, one per line: instructions then input).
  const r = await call(() => client.responses.create({ model, input: prompt, max_output_tokens: 60, temperature: 0 }));
  check('responses: output_text is the chat\'s text (llama2.c\'s)', r.r && r.r.output_text === expected, r.r || errorOf(r));
  check('responses: cut at max_output_tokens is incomplete, reason max_output_tokens, usage in tokens',
    r.r && r.r.status === 'incomplete' && r.r.incomplete_details.reason === 'max_output_tokens' && r.r.usage.input_tokens === 5 &&
    r.r.usage.output_tokens === 60 && r.r.usage.total_tokens === 65 && r.r.output[0].type === 'message' &&
    r.r.output[0].content[0].type === 'output_text', r.r);
  const instructions = 'Once upon a time';
  const ri = await call(() => client.responses.create({ model, instructions, input: [{ role: 'user', content: [{ type: 'input_text', text: 'there was' }] }],
    max_output_tokens: 20, temperature: 0 }));
  const ci = await call(() => client.chat.completions.create({ model, messages: [{ role: 'system', content: instructions }, { role: 'user', content: 'there was' }],
    max_tokens: 20, temperature: 0 }));
  check('responses with instructions and input_text parts = the chat of a system and a user message', ri.r && ci.r &&
    ri.r.output_text === ci.r.choices[0].message.content && ri.r.instructions === instructions, { r: ri.r || errorOf(ri), chat: ci.r || errorOf(ci) });
  const s = await call(() => client.responses.create({ model, input: prompt, max_output_tokens: 60, temperature: 0, stream: true }));
  const deltas = s.r ? s.r.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('') : null;
  check('responses stream: the deltas are the text', deltas === expected, s.r ? deltas : errorOf(s));
  const types = s.r ? s.r.map((e) => e.type) : [];
  check('responses stream: the events in order, numbered', s.r && types[0] === 'response.created' && types[1] === 'response.in_progress' &&
    types[2] === 'response.output_item.added' && types[3] === 'response.content_part.added' &&
    types.slice(-4).join() === 'response.output_text.done,response.content_part.done,response.output_item.done,response.incomplete' &&
    s.r.every((e, i) => e.sequence_number === i) && s.r[s.r.length - 1].response.output_text === undefined &&
    s.r[s.r.length - 1].response.output[0].content[0].text === expected, types);
  const done = await call(() => client.responses.create({ model, input: prompt, max_output_tokens: 60, temperature: 0, stop: undefined }));
  check('responses: the same again (a cached prefix) is the same text', done.r && done.r.output_text === expected &&
    done.r.usage.input_tokens_details.cached_tokens === 4, done.r || errorOf(done));
  // store (true by default): a response goes on from an earlier one's conversation, without
  // its instructions (as OpenAI's does): the chat of the whole conversation.
  const first = await call(() => client.responses.create({ model, instructions: 'A story.', input: prompt, max_output_tokens: 12, temperature: 0 }));
  const next = await call(() => client.responses.create({ model, previous_response_id: first.r?.id, input: 'She was', max_output_tokens: 12,
    temperature: 0 }));
  const thread = await call(() => client.chat.completions.create({ model, messages: [{ role: 'user', content: prompt },
    { role: 'assistant', content: first.r?.output_text }, { role: 'user', content: 'She was' }], max_tokens: 12, temperature: 0 }));
  check('responses: previous_response_id goes on from its conversation (not its instructions) = the chat of the whole conversation',
    first.r && next.r && thread.r && first.r.store === true && next.r.previous_response_id === first.r.id &&
    next.r.output_text === thread.r.choices[0].message.content && next.r.output_text.length > 0,
    { first: first.r || errorOf(first), next: next.r || errorOf(next), chat: thread.r || errorOf(thread) });
  const got = await call(() => client.responses.retrieve(first.r?.id), false);
  check('responses.retrieve: the stored response as answered', got.r && first.r && got.r.id === first.r.id &&
    got.r.output[0].content[0].text === first.r.output_text && got.r.instructions === 'A story.', got.r || errorOf(got));
  const del = await call(() => client.responses.del(first.r?.id), false);
  const gone = await call(() => client.responses.retrieve(first.r?.id), false);
  check('responses.del, then retrieve is NotFoundError', !del.e && gone.e instanceof OpenAI.NotFoundError, { del: errorOf(del), gone: gone.r || errorOf(gone) });
  const after = await call(() => client.responses.create({ model, input: prompt, previous_response_id: first.r?.id }));
  check('responses: a previous_response_id not stored is 400 previous_response_not_found', after.e instanceof OpenAI.BadRequestError &&
    after.e.code === 'previous_response_not_found' && after.e.param === 'previous_response_id', after.r || errorOf(after));
  const unstored = await call(() => client.responses.create({ model, input: prompt, max_output_tokens: 4, temperature: 0, store: false }));
  const none = await call(() => client.responses.retrieve(unstored.r?.id), false);
  check('responses with store false: answered, not kept', unstored.r?.store === false && none.e instanceof OpenAI.NotFoundError,
    { unstored: unstored.r || errorOf(unstored), none: none.r || errorOf(none) });
});

await section('structured output and logprobs', async () => {
  const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer' } },
    required: ['name', 'age'], additionalProperties: false };
  for (const seed of [1, 2]) {
    const r = await call(() => client.chat.completions.create({ model, messages, max_tokens: 120, temperature: 1, seed,
      response_format: { type: 'json_schema', json_schema: { name: 'person', strict: true, schema } } }));
    let value = null;
    try { value = r.r && JSON.parse(r.r.choices[0].message.content); } catch (e) { value = null; }
    check(`response_format json_schema (seed ${seed}): JSON of the schema's shape`, value && typeof value.name === 'string' &&
      value.name.length <= 12 && Number.isInteger(value.age) && Object.keys(value).join() === 'name,age' &&
      r.r.choices[0].finish_reason === 'stop', r.r ? r.r.choices[0] : errorOf(r));
  }
  const o = await call(() => client.completions.create({ model, prompt, max_tokens: 40, temperature: 1, seed: 5, response_format: { type: 'json_object' } }));
  check('response_format json_object: starts an object', o.r && /^\s?\{/.test(o.r.choices[0].text), o.r || errorOf(o));
  const lp = await call(() => client.chat.completions.create({ model, messages, max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 2 }));
  const content = lp.r && lp.r.choices[0].logprobs && lp.r.choices[0].logprobs.content;
  check('chat logprobs: one entry a token, two alternatives, the first the chosen', content && content.length === 5 &&
    content.every((e) => e.top_logprobs.length === 2 && e.top_logprobs[0].token === e.token && e.logprob <= 0), lp.r || errorOf(lp));
  const bad = await call(() => client.chat.completions.create({ model, messages, max_tokens: 5,
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: 'a+' } } } }));
  check('a schema keyword outside the subset: 400 naming it', bad.e instanceof OpenAI.BadRequestError && bad.e.param === 'response_format' &&
    /"pattern"/.test(bad.e.message), errorOf(bad));
});

await section('stop', async () => {
  // [stop, the text before it]: "girl named" spans the tokens " girl" and " named"; "irl na"
  // begins and ends inside them; "Lily!" never matches, but "Lily" is held twice until the
  // next token (or the end) says it is text.
  const cases = [['.', upToFirst('.')], [['girl named', 'zzz'], upToFirst('girl named')], [['zzz', 'irl na'], upToFirst('irl na')],
    [['Lily!'], expected]];
  for (const [stop, want] of cases) {
    const finish = want === expected ? 'length' : 'stop';
    const w = await call(() => client.completions.create({ model, prompt, max_tokens: 60, temperature: 0, stop }));
    check(`stop ${JSON.stringify(stop)}: whole response`, w.r && w.r.choices[0].text === want && w.r.choices[0].finish_reason === finish,
      w.r ? w.r.choices[0] : errorOf(w));
    const s = await call(() => client.completions.create({ model, prompt, max_tokens: 60, temperature: 0, stop, stream: true }));
    check(`stop ${JSON.stringify(stop)}: streamed, no part of it sent`, s.r && textOf(s.r) === want &&
      JSON.stringify(finishOf(s.r)) === JSON.stringify([finish]), s.r ? { text: textOf(s.r), finish: finishOf(s.r) } : errorOf(s));
    const c = await call(() => client.chat.completions.create({ model, messages, max_tokens: 60, temperature: 0, stop, stream: true,
      stream_options: { include_usage: true } }));
    const last = c.r && c.r[c.r.length - 1];
    check(`stop ${JSON.stringify(stop)}: chat stream with include_usage`, c.r && textOf(c.r) === want && last.choices.length === 0 &&
      last.usage.completion_tokens >= 1 && last.usage.completion_tokens <= 60, c.r ? { text: textOf(c.r), last } : errorOf(c));
  }
  const empty = await call(() => client.completions.create({ model, prompt, max_tokens: 60, temperature: 0, stop: ['', ''] }));
  check('stop ["", ""]: empty sequences are ignored', empty.r && empty.r.choices[0].text === expected, empty.r || errorOf(empty));
});

await section('max_completion_tokens', async () => {
  const chat = await call(() => client.chat.completions.create({ model, messages, max_completion_tokens: 5, temperature: 0 }));
  check('chat max_completion_tokens 5', chat.r && chat.r.usage.completion_tokens === 5 && chat.r.choices[0].finish_reason === 'length' &&
    chat.r.choices[0].message.content.length > 0 && expected.startsWith(chat.r.choices[0].message.content), chat.r || errorOf(chat));
  const c = await call(() => client.completions.create({ model, prompt, max_completion_tokens: 7, temperature: 0 }));
  check('completion max_completion_tokens 7', c.r && c.r.usage.completion_tokens === 7 && expected.startsWith(c.r.choices[0].text), c.r || errorOf(c));
  const both = await call(() => client.chat.completions.create({ model, messages, max_tokens: 5, max_completion_tokens: 6 }));
  check('max_tokens with max_completion_tokens: 400 invalid_parameter_combination, as OpenAI',
    both.e instanceof OpenAI.BadRequestError && both.e.code === 'invalid_parameter_combination' && both.e.param === 'max_tokens', errorOf(both));
});

await section('errors', async () => {
  for (const [name, create] of [['completion', () => client.completions.create({ model: 'gpt-4o-nonexistent', prompt, max_tokens: 4 })],
    ['chat', () => client.chat.completions.create({ model: 'gpt-4o-nonexistent', messages, max_tokens: 4 })]]) {
    const r = await call(create);
    check(name + ': an unknown model is NotFoundError model_not_found', r.e instanceof OpenAI.NotFoundError && r.e.code === 'model_not_found' &&
      r.e.param === 'model' && r.e.type === 'invalid_request_error', errorOf(r));
  }
  const wrong = await call(() => wrongKey.completions.create({ model, prompt, max_tokens: 4 }));
  check('a wrong key is AuthenticationError invalid_api_key', wrong.e instanceof OpenAI.AuthenticationError && wrong.e.code === 'invalid_api_key' &&
    /Incorrect API key provided/.test(wrong.e.message), errorOf(wrong));
  const next = await call(() => client.completions.create({ model, prompt, max_tokens: 60, temperature: 0 }));
  check('the next request on the same connection after a 401 is answered', next.r && next.r.choices[0].text === expected, next.r || errorOf(next));
  const none = await raw('POST', '/v1/completions', { 'Content-Type': 'application/json' }, JSON.stringify({ prompt }));
  check('no key: 401 saying so, code null', none.status === 401 && none.body.error.code === null && !/Incorrect/.test(none.body.error.message) &&
    /bearer/i.test(none.body.error.message), none);
  const bad = [
    ['temperature 5', { temperature: 5 }, 'temperature', null],
    ['n 17', { n: 17 }, 'n', null],
    ['stop of 5 sequences', { stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop', null],
    ['stop [5]', { stop: [5] }, 'stop', null],
    ['prompt ["a", "b"]', { prompt: ['a', 'b'] }, 'prompt', null, /several prompts is not supported/],
    ['prompt 7', { prompt: 7 }, 'prompt', null, /a string or a non-empty array of token ids/],
    ['stream_options without stream', { stream_options: { include_usage: true } }, 'stream_options', null],
    ['max_tokens 600 past the context', { max_tokens: 600 }, 'prompt', 'context_length_exceeded', /5 tokens and max_tokens 600 exceed the model's context of 512/],
    ['a 600 KB prompt', { prompt: 'Once upon a time '.repeat(36000) }, 'prompt', 'context_length_exceeded', /maximum context length is 512 tokens/],
  ];
  for (const [name, body, param, code, message] of bad) {
    const r = await call(() => client.completions.create({ model, prompt, max_tokens: 4, ...body }));
    check(`400 ${name}: param ${param}, code ${code}`, r.e instanceof OpenAI.BadRequestError && r.e.param === param && r.e.code === code &&
      (!message || message.test(r.e.message)) && !/max_rows/.test(r.e.message), errorOf(r));
  }
  const chat = await call(() => client.chat.completions.create({ model, messages, max_tokens: 600 }));
  check('chat past the context: param messages, context_length_exceeded', chat.e instanceof OpenAI.BadRequestError && chat.e.param === 'messages' &&
    chat.e.code === 'context_length_exceeded', errorOf(chat));
  const big = await call(() => client.completions.create({ model, prompt: 'x'.repeat(1100000), max_tokens: 4 }));
  check('a body over 1 MiB: 413 with an error object', big.e && big.e.status === 413 && /1 MiB/.test(big.e.message), errorOf(big));
  const lost = await raw('POST', '/v1/nothing', { Authorization: 'Bearer ' + key, 'Content-Type': 'application/json' }, '{}');
  check('an unknown path: 404 with an error object (param and code null)', lost.status === 404 && lost.body.error.param === null &&
    lost.body.error.code === null && lost.body.error.type === 'invalid_request_error', lost);
});

agent.destroy();
console.log(JSON.stringify({ checks, statuses, generations }));
