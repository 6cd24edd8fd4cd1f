// Tool calls through the official OpenAI Node client (npm `openai`), as a user's program makes
// them, against daemons hosting a model whose chat template teaches Hermes (Qwen) tool calls;
// tests/serve/test_openai_client.cpp runs it through run.sh (chat completions, its helpers,
// and /v1/responses with the same tools):
//
//   node tools_test.mjs CACHE BASE_URL KEY MODEL TOOLS
//
// TOOLS is the JSON of the requests' "tools" (functions with JSON-schema parameters), so that
// the schemas the caller validates against are the ones the server was given. Prints one JSON
// object: {"checks": [{"name", "ok", "detail"}], "arguments": {"<function>": ["<arguments>",
// ...]} (every call's arguments the client got, by function name, for the caller to validate
// against that function's parameters)}. Exit 0 once the report is printed, whatever the
// checks say: the caller asserts.
import { createRequire } from 'node:module';

import { check, checks, errorOf, section } from './report.mjs';

const [cache, base, key, model, toolsJson] = process.argv.slice(2);
const OpenAI = createRequire(cache + '/package.json')('openai');
const client = new OpenAI({ apiKey: key, baseURL: base + '/v1', maxRetries: 0, timeout: 120000 });

const tools = JSON.parse(toolsJson);
const names = tools.map((t) => t.function.name);
const messages = [{ role: 'user', content: 'Who?' }];
// Sampled (temperature 1, a seed a request): the calls differ, each the grammar's. max_tokens
// leaves room for a whole call (a reply cut at max_tokens is text, no call; an integer's digits
// are unbounded).
const ask = { model, messages, tools, max_tokens: 300, temperature: 1 };
const named = (name) => ({ type: 'function', function: { name } });
const choices = [['required', 'required'], ...names.map((n) => [`named ${n}`, named(n)])];

const got = Object.fromEntries(names.map((n) => [n, []]));
function kept(call) {  // a call's arguments, for the caller's validator
  if (call?.function && names.includes(call.function.name) && typeof call.function.arguments === 'string') got[call.function.name].push(call.function.arguments);
}

// {r} or {e}: the request's result, or the APIError the client threw.
async function attempt(fn) {
  try {
    return { r: await fn() };
  } catch (e) {
    if (e instanceof OpenAI.APIError) return { e };
    throw e;
  }
}

const parsed = (s) => {
  try {
    return JSON.parse(s);
  } catch {
    return undefined;
  }
};
// One well-formed call of a function offered (`name` when one was named).
const wellFormed = (call, name) => call && typeof call.id === 'string' && call.id.length > 0 && call.type === 'function' &&
  (name ? call.function?.name === name : names.includes(call.function?.name)) && typeof call.function.arguments === 'string' &&
  parsed(call.function.arguments) !== undefined;
const sameCall = (a, b) => a && b && a.function?.name === b.function?.name && a.function?.arguments === b.function?.arguments;
const callsIn = (chunks) => chunks.filter((c) => c.choices[0]?.delta?.tool_calls);
const finishes = (chunks) => chunks.map((c) => c.choices[0]?.finish_reason).filter(Boolean);
const textOf = (chunks) => chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');

// Per seed and tool_choice, the call of the whole reply: the one a stream and the helpers must carry.
const whole = {};

await section('forced calls', async () => {
  for (const seed of [1, 2, 3]) {
    for (const [label, tool_choice] of choices) {
      const name = typeof tool_choice === 'string' ? null : tool_choice.function.name;
      const what = `${label} (seed ${seed})`;
      const w = await attempt(() => client.chat.completions.create({ ...ask, tool_choice, seed }));
      const choice = w.r?.choices[0];
      const call = choice?.message.tool_calls?.[0];
      check(`${what}: finish_reason tool_calls, one call, content null`, choice && choice.finish_reason === 'tool_calls' &&
        choice.message.tool_calls.length === 1 && choice.message.content === null && choice.message.role === 'assistant', choice || errorOf(w));
      check(`${what}: the call has an id, type function, ${name ?? 'a function offered'}, arguments JSON.parse accepts`, wellFormed(call, name), call);
      kept(call);
      whole[what] = { call, message: choice?.message };

      // stream: true: the call in one delta once it is whole, then finish_reason tool_calls.
      const s = await attempt(async () => {
        const chunks = [];
        for await (const c of await client.chat.completions.create({ ...ask, tool_choice, seed, stream: true })) chunks.push(c);
        return chunks;
      });
      const deltas = s.r ? callsIn(s.r) : [];
      const streamed = deltas[0]?.choices[0].delta.tool_calls;
      check(`${what} streamed: one tool_calls delta, its call at index 0 the whole reply's, no text`, s.r && deltas.length === 1 &&
        streamed.length === 1 && streamed[0].index === 0 && wellFormed(streamed[0], name) && sameCall(streamed[0], call) && textOf(s.r) === '',
        s.r ? { deltas, text: textOf(s.r), call } : errorOf(s));
      check(`${what} streamed: finish_reason tool_calls, once`, s.r && finishes(s.r).join() === 'tool_calls', s.r ? finishes(s.r) : errorOf(s));
      kept(streamed?.[0]);

      // The client's stream helper accumulates the deltas into a chat completion.
      const h = await attempt(async () => {
        const stream = client.beta.chat.completions.stream({ ...ask, tool_choice, seed });
        const done = [];
        stream.on('tool_calls.function.arguments.done', (e) => done.push(e));
        return { final: await stream.finalChatCompletion(), done };
      });
      const final = h.r?.final.choices[0];
      const helped = final?.message.tool_calls?.[0];
      check(`${what} stream helper: finalChatCompletion carries the whole reply's call, finish_reason tool_calls`, final &&
        final.finish_reason === 'tool_calls' && final.message.tool_calls.length === 1 && wellFormed(helped, name) && sameCall(helped, call),
        final ? { final, call } : errorOf(h));
      // strict tools: the helper parses the arguments itself, and says when a call is done.
      check(`${what} stream helper: parsed_arguments, one arguments.done event with the call`, helped &&
        JSON.stringify(helped.function.parsed_arguments) === JSON.stringify(parsed(helped.function.arguments)) && h.r.done.length === 1 &&
        h.r.done[0].name === helped.function.name && h.r.done[0].arguments === helped.function.arguments, h.r ? { helped, done: h.r.done } : errorOf(h));
      kept(helped);
    }
  }
});

await section('tool_choice none', async () => {
  const w = await attempt(() => client.chat.completions.create({ ...ask, max_tokens: 24, tool_choice: 'none', seed: 1 }));
  const choice = w.r?.choices[0];
  check('tool_choice none beside tools: a text reply, no tool_calls', choice && choice.message.tool_calls === undefined &&
    typeof choice.message.content === 'string' && ['stop', 'length'].includes(choice.finish_reason), choice || errorOf(w));
  const s = await attempt(async () => {
    const chunks = [];
    for await (const c of await client.chat.completions.create({ ...ask, max_tokens: 24, tool_choice: 'none', seed: 1, stream: true })) chunks.push(c);
    return chunks;
  });
  check('tool_choice none streamed: no tool_calls delta, the same text', s.r && callsIn(s.r).length === 0 && choice &&
    textOf(s.r) === choice.message.content, s.r ? { text: textOf(s.r), whole: choice?.message.content } : errorOf(s));
});

await section('a tool result in the next request', async () => {
  // The assistant's message as the client got it, then the tool's answer to its call.
  const first = whole['required (seed 1)'];
  const result = { role: 'tool', tool_call_id: first.call?.id, content: JSON.stringify({ temperature: 12, unit: 'C' }) };
  const thread = [...messages, first.message, result];
  const r = await attempt(() => client.chat.completions.create({ ...ask, messages: thread, max_tokens: 8, seed: 1 }));
  check('assistant tool_calls + role tool with tool_call_id: 200, an assistant message', r.r?.choices[0].message.role === 'assistant' &&
    ['stop', 'length', 'tool_calls'].includes(r.r.choices[0].finish_reason), r.r || errorOf(r));
  const again = await attempt(() => client.chat.completions.create({ ...ask, messages: thread, tool_choice: named(names[0]), seed: 1 }));
  const call = again.r?.choices[0].message.tool_calls?.[0];
  check(`after the result, a call named ${names[0]} again`, again.r?.choices[0].finish_reason === 'tool_calls' && wellFormed(call, names[0]),
    again.r || errorOf(again));
  kept(call);
});

// runTools: the client calls the user's function with the parsed arguments and sends back its
// result. With a named tool_choice it stops after that call (AbstractChatCompletionRunner's
// _runTools returns once the named function ran), so one request; maxChatCompletions 2 bounds
// a runner that would go on.
await section('runTools', async () => {
  const want = whole[`named ${names[0]} (seed 1)`].call;
  for (const stream of [false, true]) {
    const what = `runTools${stream ? ' streamed' : ''} named ${names[0]}`;
    const calledWith = [];
    const runnable = tools.map((t) => ({ type: 'function', function: { ...t.function, parse: JSON.parse,
      function: (args) => {
        calledWith.push({ name: t.function.name, args });
        return { ok: true, got: Object.keys(args) };
      } } }));
    const r = await attempt(async () => {
      const runner = client.beta.chat.completions.runTools({ ...ask, tools: runnable, tool_choice: named(names[0]), seed: 1, stream },
        { maxChatCompletions: 2 });
      await runner.done();
      return runner;
    });
    const runner = r.r;
    const completions = runner ? runner.allChatCompletions() : [];
    const call = completions[0]?.choices[0].message.tool_calls?.[0];
    check(`${what}: one request, its call the whole reply's with the same seed`, completions.length === 1 && wellFormed(call, names[0]) &&
      sameCall(call, want), runner ? { completions, want } : errorOf(r));
    check(`${what}: the function called once, with the parsed arguments`, calledWith.length === 1 && calledWith[0].name === names[0] &&
      call && JSON.stringify(calledWith[0].args) === JSON.stringify(parsed(call.function.arguments)), { calledWith, call });
    const last = runner?.messages.at(-1);
    check(`${what}: its result a role tool message with the call's id`, last && last.role === 'tool' && last.tool_call_id === call?.id &&
      last.content === JSON.stringify({ ok: true, got: Object.keys(calledWith[0]?.args ?? {}) }), runner ? runner.messages : errorOf(r));
    kept(call);
    if (!runner) continue;
    // The runner's conversation as it stands (its messages carry the client's own fields too,
    // parsed and parsed_arguments), sent on.
    const next = await attempt(() => client.chat.completions.create({ ...ask, messages: runner.messages, max_tokens: 8, seed: 1 }));
    check(`${what}: its messages in the next request: 200, an assistant message`, next.r?.choices[0].message.role === 'assistant', next.r || errorOf(next));
  }
});

// POST /v1/responses with tools in the Responses API's flat shape: converted to the chat, so the
// same seed gives the chat's call, as a function_call output item (whole) or its events
// (streamed); the call and its result go back as input items.
await section('responses with tools', async () => {
  const flat = tools.map((t) => ({ type: 'function', ...t.function }));
  const rask = { model, input: 'Who?', tools: flat, max_output_tokens: 300, temperature: 1, seed: 1 };
  const firstCall = {};
  for (const [label, tool_choice] of [['required', 'required'], [`named ${names[0]}`, { type: 'function', name: names[0] }]]) {
    const chat = whole[`${label} (seed 1)`]?.call;
    const w = await attempt(() => client.responses.create({ ...rask, tool_choice }));
    const items = w.r?.output ?? [];
    const call = items.find((i) => i.type === 'function_call');
    check(`responses ${label}: completed, one function_call item (id, call_id, status completed), no text`, w.r?.status === 'completed' &&
      items.length === 1 && call && typeof call.id === 'string' && typeof call.call_id === 'string' && call.status === 'completed' &&
      w.r.output_text === '', w.r || errorOf(w));
    check(`responses ${label}: the chat's call with the same seed (name, arguments)`, call && chat && call.name === chat.function.name &&
      call.arguments === chat.function.arguments && parsed(call.arguments) !== undefined, { call, chat });
    if (call && names.includes(call.name)) got[call.name].push(call.arguments);
    firstCall[label] = call;

    const s = await attempt(async () => {
      const events = [];
      for await (const e of await client.responses.create({ ...rask, tool_choice, stream: true })) events.push(e);
      return events;
    });
    const ev = s.r ?? [];
    const types = ev.map((e) => e.type);
    const added = ev.find((e) => e.type === 'response.output_item.added');
    const argsDone = ev.find((e) => e.type === 'response.function_call_arguments.done');
    const itemDone = ev.find((e) => e.type === 'response.output_item.done');
    const deltas = ev.filter((e) => e.type === 'response.function_call_arguments.delta').map((e) => e.delta).join('');
    const last = ev[ev.length - 1];
    check(`responses ${label} streamed: created, in_progress, the call's item added, its arguments, done, completed; no text events`,
      types[0] === 'response.created' && types[1] === 'response.in_progress' && added?.item.type === 'function_call' &&
      added.item.status === 'in_progress' && !types.some((t) => t.startsWith('response.output_text')) &&
      last?.type === 'response.completed' && ev.every((e, i) => e.sequence_number === i), types);
    check(`responses ${label} streamed: the arguments (deltas, done, the item done, the final output) are the whole reply's`, call &&
      deltas === call.arguments && argsDone?.arguments === call.arguments && argsDone.name === call.name &&
      itemDone?.item.arguments === call.arguments && itemDone.item.status === 'completed' &&
      last?.response.output.length === 1 && last.response.output[0].arguments === call.arguments, { call, deltas, argsDone, itemDone });
  }
  // The call and its output as input items: 200, a response.
  const c = firstCall.required;
  const follow = await attempt(() => client.responses.create({ ...rask, tool_choice: 'auto', max_output_tokens: 8, input: [
    { role: 'user', content: 'Who?' },
    { type: 'function_call', call_id: c?.call_id, name: c?.name, arguments: c?.arguments },
    { type: 'function_call_output', call_id: c?.call_id, output: '12 C' }] }));
  check('responses: a function_call and its function_call_output as input items: 200, a response', follow.r &&
    ['completed', 'incomplete'].includes(follow.r.status) && follow.r.output.length >= 1, follow.r || errorOf(follow));
  const web = await attempt(() => client.responses.create({ ...rask, tools: [{ type: 'web_search_preview' }] }));
  check('responses: a tool other than a function is BadRequestError unsupported_parameter naming its type', web.e instanceof OpenAI.BadRequestError &&
    web.e.param === 'tools' && web.e.code === 'unsupported_parameter' && /web_search_preview/.test(web.e.message), web.r || errorOf(web));
});

await section('refusals', async () => {
  const bad = [
    ['tool_choice naming a function not in tools', { tool_choice: named('nowhere') }, /"nowhere"/],
    ['tool_choice required without tools', { tools: undefined, tool_choice: 'required' }, /needs "tools"/],
    ['tool_choice naming a function without tools', { tools: undefined, tool_choice: named(names[0]) }, /does not offer/],
  ];
  for (const [name, body, message] of bad) {
    const r = await attempt(() => client.chat.completions.create({ ...ask, ...body }));
    check(`${name}: BadRequestError, param tool_choice`, r.e instanceof OpenAI.BadRequestError && r.e.param === 'tool_choice' &&
      r.e.type === 'invalid_request_error' && message.test(r.e.message), r.r || errorOf(r));
  }
});

console.log(JSON.stringify({ checks, arguments: got }));
