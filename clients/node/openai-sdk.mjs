// The official OpenAI Node SDK, unmodified, against chatgate.
// Run by tests/tests/clients.rs; environment described in common.mjs.

import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { VERSION } from 'openai/version';
import {
  BAD_KEY,
  BASE_URL,
  KEY,
  LIMITED_KEY,
  BROKE_KEY,
  MODEL,
  PNG,
  journal,
  rejection,
  run,
  sentBodies,
} from './common.mjs';

const WEATHER_TOOL = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city.',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' } },
      required: ['city'],
    },
  },
};

/** A client configured through the documented options. */
const client = (opts = {}) => new OpenAI({ baseURL: BASE_URL, apiKey: KEY, ...opts });

async function environmentAndModels() {
  // With no options the SDK reads OPENAI_BASE_URL and OPENAI_API_KEY.
  assert.equal(process.env.OPENAI_BASE_URL, BASE_URL);
  assert.equal(process.env.OPENAI_API_KEY, KEY);
  const envClient = new OpenAI();
  assert.equal(envClient.baseURL, BASE_URL);
  const ids = [];
  for await (const m of envClient.models.list()) {
    assert.equal(m.object, 'model');
    assert.equal(m.owned_by, 'chatgate');
    ids.push(m.id);
  }
  assert.deepEqual(ids, [MODEL]);
  const page = await client().models.list();
  assert.deepEqual(
    page.data.map(m => m.id),
    [MODEL],
  );
  const done = await envClient.chat.completions.create({
    model: MODEL,
    messages: [{ role: 'user', content: 'Hello from the environment' }],
  });
  assert.ok(done.choices[0].message.content.startsWith('You said: Hello from the environment'));
}

async function nonStreamed() {
  const mark = (await journal()).length;
  const { data: done, response, request_id } = await client()
    .chat.completions.create({
      model: MODEL,
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: 'What is two plus two?' },
      ],
      max_completion_tokens: 400,
    })
    .withResponse();
  assert.equal(response.status, 200);
  assert.ok(request_id?.startsWith('req_'), request_id);
  assert.equal(done._request_id, request_id);
  assert.equal(done.object, 'chat.completion');
  assert.equal(done.model, MODEL);
  const choice = done.choices[0];
  assert.equal(choice.finish_reason, 'stop');
  const msg = choice.message;
  assert.equal(msg.role, 'assistant');
  assert.ok(msg.content.startsWith('You said: What is two plus two?'), msg.content);
  // Undeclared in the SDK's types, kept as sent: reasoning apart from content.
  const reasoning = msg.reasoning_content;
  assert.equal(typeof reasoning, 'string');
  assert.ok(reasoning.length > 20);
  assert.ok(!msg.content.includes(reasoning) && !reasoning.includes(msg.content));
  const u = done.usage;
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  assert.ok(u.completion_tokens_details.reasoning_tokens > 0);
  const [body] = await sentBodies(mark);
  assert.equal(body.max_completion_tokens, 400);
  assert.deepEqual(
    body.messages.map(m => m.role),
    ['system', 'user'],
  );
}

async function streamed() {
  const mark = (await journal()).length;
  const stream = await client().chat.completions.create({
    model: MODEL,
    messages: [{ role: 'user', content: 'Why is the sky blue?' }],
    stream: true,
  });
  let reasoning = '';
  let content = '';
  let usage = null;
  let finish = null;
  const order = [];
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.choices.length === 0) {
      // The usage chunk. The SDK asked for none; the gateway always does.
      assert.ok(chunk.usage);
      usage = chunk.usage;
      continue;
    }
    const delta = chunk.choices[0].delta;
    if (delta.reasoning_content) {
      reasoning += delta.reasoning_content;
      order.push('r');
    }
    if (delta.content) {
      content += delta.content;
      order.push('c');
    }
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  assert.equal(finish, 'stop');
  assert.ok(content.startsWith('You said: Why is the sky blue?'), content);
  assert.ok(reasoning.length > 20 && !content.includes(reasoning));
  assert.equal(order[0], 'r');
  assert.equal(order.at(-1), 'c');
  assert.equal(order.join('').replace(/^r+c+$/, ''), '', 'reasoning, then content, never interleaved');
  assert.ok(usage && usage.completion_tokens_details.reasoning_tokens > 0);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  const [body] = await sentBodies(mark);
  assert.equal(body.stream, true);
  assert.deepEqual(body.stream_options, { include_usage: true }, 'added by the gateway');

  // The SDK's streaming helper, which accumulates the completion for you.
  const s = client().chat.completions.stream({
    model: MODEL,
    messages: [{ role: 'user', content: 'Why is the sky blue?' }],
    stream_options: { include_usage: true },
  });
  let deltas = '';
  let helperReasoning = '';
  s.on('content.delta', e => {
    deltas += e.delta;
  });
  s.on('chunk', chunk => {
    helperReasoning += chunk.choices[0]?.delta?.reasoning_content ?? '';
  });
  const final = await s.finalChatCompletion();
  const msg = final.choices[0].message;
  assert.equal(msg.content, content);
  assert.equal(deltas, content);
  assert.equal(helperReasoning, reasoning);
  // The helper copies undeclared delta members onto the snapshot without
  // concatenating them: its reasoning_content is the last fragment only.
  assert.ok(reasoning.endsWith(msg.reasoning_content), msg.reasoning_content);
  assert.equal(final.usage.total_tokens, usage.total_tokens);
}

async function toolRoundTrip() {
  const c = client();
  const messages = [{ role: 'user', content: 'Paris' }];
  const first = await c.chat.completions.create({ model: MODEL, messages, tools: [WEATHER_TOOL] });
  const choice = first.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.tool_calls.length, 1);
  const call = choice.message.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris' });
  // As the SDK's examples do: push the returned message object as it is.
  messages.push(choice.message);
  messages.push({ role: 'tool', tool_call_id: call.id, content: 'sunny, 21C' });
  const mark = (await journal()).length;
  const second = await c.chat.completions.create({ model: MODEL, messages, tools: [WEATHER_TOOL] });
  assert.equal(second.choices[0].finish_reason, 'stop');
  const answer = second.choices[0].message.content;
  assert.ok(answer.startsWith('The tool returned: sunny, 21C'), answer);
  const [body] = await sentBodies(mark);
  const assistant = body.messages[1];
  assert.equal(assistant.role, 'assistant');
  assert.equal(assistant.tool_calls[0].id, call.id);
  assert.ok(!('reasoning_content' in assistant), 'the gateway strips reasoning_content');
  assert.deepEqual(body.messages[2], { role: 'tool', tool_call_id: call.id, content: 'sunny, 21C' });

  // The SDK's tool runner does the same loop itself.
  const runner = c.chat.completions.runTools({
    model: MODEL,
    messages: [{ role: 'user', content: 'Paris' }],
    tools: [
      {
        type: 'function',
        function: {
          ...WEATHER_TOOL.function,
          parse: JSON.parse,
          function: async ({ city }) => {
            assert.equal(city, 'Paris');
            return 'sunny, 21C';
          },
        },
      },
    ],
  });
  const ran = await runner.finalContent();
  assert.ok(ran.startsWith('The tool returned: sunny, 21C'), ran);
  const history = runner.messages.map(m => m.role);
  assert.deepEqual(history, ['user', 'assistant', 'tool', 'assistant']);

  // Streamed, through the helper: tool-call deltas assembled.
  const s = c.chat.completions.stream({
    model: MODEL,
    messages: [{ role: 'user', content: 'Paris' }],
    tools: [WEATHER_TOOL],
  });
  const final = await s.finalChatCompletion();
  assert.equal(final.choices[0].finish_reason, 'tool_calls');
  const scall = final.choices[0].message.tool_calls[0];
  assert.equal(scall.id, call.id);
  assert.equal(scall.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(scall.function.arguments), { city: 'Paris' });
}

async function image() {
  const mark = (await journal()).length;
  const part = { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG}`, detail: 'low' } };
  const done = await client().chat.completions.create({
    model: MODEL,
    messages: [{ role: 'user', content: [{ type: 'text', text: 'What is in this image?' }, part] }],
  });
  assert.ok(done.choices[0].message.content.startsWith('You said: What is in this image?'));
  const [body] = await sentBodies(mark);
  assert.deepEqual(body.messages[0].content[1], part);
}

async function errors() {
  // 401.
  const bad = new OpenAI({ baseURL: BASE_URL, apiKey: BAD_KEY, maxRetries: 0 });
  for (const call of [
    () => bad.models.list(),
    () => bad.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }),
  ]) {
    const e = await rejection(call(), '401');
    assert.ok(e instanceof OpenAI.AuthenticationError, String(e));
    assert.equal(e.status, 401);
    assert.equal(e.code, 'invalid_api_key');
    assert.equal(e.type, 'authentication_error');
    assert.ok(e.requestID?.startsWith('req_'));
  }

  // 400 with param, non-streamed and streamed.
  for (const stream of [false, true]) {
    const e = await rejection(
      client().chat.completions.create({
        model: MODEL,
        messages: [{ role: 'user', content: 'hi' }],
        temperature: 5,
        stream,
      }),
      '400',
    );
    assert.ok(e instanceof OpenAI.BadRequestError, String(e));
    assert.equal(e.status, 400);
    assert.deepEqual([e.type, e.code, e.param], ['invalid_request_error', 'invalid_value', 'temperature']);
  }

  // 404 for an unknown model.
  const nf = await rejection(
    client().chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] }),
    '404',
  );
  assert.ok(nf instanceof OpenAI.NotFoundError, String(nf));
  assert.equal(nf.code, 'model_not_found');

  // 502. An undocumented body parameter is sent as-is when put among the
  // params (the SDK's README); maxRetries: 0 for this request only.
  const mark = (await journal()).length;
  const e = await rejection(
    client().chat.completions.create(
      {
        model: MODEL,
        messages: [{ role: 'user', content: 'hi' }],
        x_sim: { fault: 'reject', status: 500 },
      },
      { maxRetries: 0 },
    ),
    '502',
  );
  assert.ok(e instanceof OpenAI.InternalServerError, String(e));
  assert.equal(e.status, 502);
  assert.equal(e.type, 'upstream_error');
  assert.equal(e.code, 'upstream_error');
  assert.ok(e.message.includes('HTTP 500'), e.message);
  assert.ok(e.message.includes('Tried 3 times.'), e.message);
  // The gateway tried its one endpoint three times (a 500 is transient);
  // the SDK, told maxRetries: 0, asked once.
  assert.equal((await journal()).length, mark + 3, 'retried although maxRetries: 0');
}

async function rateLimitRetry() {
  const noRetry = new OpenAI({ baseURL: BASE_URL, apiKey: LIMITED_KEY, maxRetries: 0 });
  const withDefaults = new OpenAI({ baseURL: BASE_URL, apiKey: LIMITED_KEY }); // maxRetries 2
  const messages = [{ role: 'user', content: 'ping' }];
  for (let attempt = 0; attempt < 3; attempt++) {
    let limited = null;
    for (let i = 0; i < 200 && !limited; i++) {
      try {
        await noRetry.chat.completions.create({ model: MODEL, messages });
      } catch (e) {
        if (!(e instanceof OpenAI.RateLimitError)) throw e;
        limited = e;
      }
    }
    assert.ok(limited, 'no 429 after 200 requests');
    assert.equal(limited.status, 429);
    assert.equal(limited.code, 'rate_limit_exceeded');
    assert.equal(limited.type, 'rate_limit_error');
    assert.equal(limited.headers.get('retry-after'), '1');
    const start = performance.now();
    const done = await withDefaults.chat.completions.create({ model: MODEL, messages });
    const elapsed = (performance.now() - start) / 1000;
    assert.ok(done.choices[0].message.content.startsWith('You said: ping'));
    // Under 0.3 s there was no retry at all: the bucket refilled between the
    // 429 and this call (a millisecond race), so drain it again. Without
    // Retry-After the SDK would back off 0.375 to 0.5 s, caught below.
    if (elapsed < 0.3) {
      console.log(`rate limit: refilled before the retried call (attempt ${attempt}), again`);
      continue;
    }
    assert.ok(elapsed >= 0.95 && elapsed < 5, String(elapsed));
    console.log(`rate limit: 429, Retry-After 1, retried, succeeded after ${elapsed.toFixed(3)}s`);
    console.log(`RETRY_ELAPSED_MS=${Math.round(elapsed * 1000)}`);
    return;
  }
  assert.fail('the bucket refilled before every retried call');
}

async function spentBudgetNotRetried() {
  // maxRetries 2, but x-should-retry: false: the SDK asks once.
  let sent = 0;
  const counting = (url, init) => {
    sent += 1;
    return fetch(url, init);
  };
  const client = new OpenAI({ baseURL: BASE_URL, apiKey: BROKE_KEY, fetch: counting });
  const start = performance.now();
  let refused = null;
  try {
    await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'ping' }],
      max_tokens: 16,
    });
  } catch (e) {
    if (!(e instanceof OpenAI.RateLimitError)) throw e;
    refused = e;
  }
  assert.ok(refused, 'a zero budget admitted a request');
  assert.equal(refused.status, 429);
  assert.equal(refused.code, 'insufficient_quota');
  assert.equal(refused.type, 'insufficient_quota');
  assert.equal(refused.headers.get('x-should-retry'), 'false');
  assert.ok(refused.message.includes('budget'), refused.message);
  assert.equal(sent, 1, `${sent} requests sent`);
  const elapsed = (performance.now() - start) / 1000;
  console.log(`spent budget: 429 insufficient_quota, one request, no retry (${elapsed.toFixed(3)}s)`);
}

async function cutStreamRaises() {
  // --stream-error-event: a stream the provider cuts throws an APIError
  // instead of ending like a whole answer.
  const client = new OpenAI({ baseURL: BASE_URL, apiKey: KEY, maxRetries: 0 });
  const stream = await client.chat.completions.create({
    model: MODEL,
    messages: [{ role: 'user', content: 'Tell me a story.' }],
    stream: true,
    x_sim: { fault: 'reset', after: 3 },
  });
  let thrown = null;
  try {
    for await (const chunk of stream) {
      void chunk;
    }
  } catch (e) {
    thrown = e;
  }
  assert.ok(thrown instanceof OpenAI.APIError, `a cut stream ended like a whole answer (${thrown})`);
  assert.equal(thrown.code, 'upstream_reset');
  assert.equal(thrown.type, 'upstream_error');
  assert.ok(thrown.message.includes('truncated'), thrown.message);
  console.log(`cut stream: APIError '${thrown.code}' after the events before the cut`);
}

async function providerRefusalNotRetried() {
  // 502 for a provider's 400 with x-should-retry: false: asked once, and the
  // provider's own code is readable.
  let sent = 0;
  const counting = (url, init) => {
    sent += 1;
    return fetch(url, init);
  };
  const client = new OpenAI({ baseURL: BASE_URL, apiKey: KEY, fetch: counting });
  const before = (await journal()).length;
  let refused = null;
  try {
    await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'ping' }],
      x_sim: { fault: 'reject', status: 400, message: 'context too long' },
    });
  } catch (e) {
    if (!(e instanceof OpenAI.InternalServerError)) throw e;
    refused = e;
  }
  assert.ok(refused, 'a refused request succeeded');
  assert.equal(refused.status, 502);
  assert.equal(refused.code, 'upstream_error');
  assert.equal(refused.headers.get('x-should-retry'), 'false');
  assert.equal(refused.error.provider.status, 400);
  assert.equal(refused.error.provider.message, 'context too long');
  assert.equal(sent, 1, `${sent} requests sent`);
  assert.equal((await journal()).length, before + 1, 'the gateway did not retry a refusal either');
  console.log(`provider refusal: 502, provider code '${refused.error.provider.code}', one request`);
}

await run(`openai (node) ${VERSION}`, [
  environmentAndModels,
  nonStreamed,
  streamed,
  toolRoundTrip,
  image,
  errors,
  rateLimitRetry,
  spentBudgetNotRetried,
  cutStreamRaises,
  providerRefusalNotRetried,
]);
