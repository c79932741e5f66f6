// The Vercel AI SDK with its OpenAI-compatible provider, unmodified, against
// chatgate. Run by tests/tests/clients.rs; environment described in
// common.mjs.
//
// The provider is configured only through its documented settings: name,
// baseURL, apiKey (it reads no environment variable of its own).

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createOpenAICompatible, VERSION as PROVIDER_VERSION } from '@ai-sdk/openai-compatible';
import {
  createJsonErrorResponseHandler,
  createJsonResponseHandler,
  getFromApi,
  jsonSchema as schema,
} from '@ai-sdk/provider-utils';
import { APICallError, generateText, isStepCount, jsonSchema, streamText, tool } from 'ai';
import {
  BAD_KEY,
  BASE_URL,
  KEY,
  LIMITED_KEY,
  MODEL,
  PNG,
  journal,
  rejection,
  run,
  sentBodies,
} from './common.mjs';

const AI_VERSION = JSON.parse(readFileSync(new URL('./node_modules/ai/package.json', import.meta.url))).version;

/** The documented way to make a provider for an OpenAI-compatible API. */
const provider = (apiKey = KEY, extra = {}) =>
  createOpenAICompatible({ name: 'chatgate', baseURL: BASE_URL, apiKey, ...extra });
const model = (apiKey) => provider(apiKey)(MODEL);

const weather = tool({
  description: 'The weather in a city.',
  inputSchema: jsonSchema({
    type: 'object',
    properties: { city: { type: 'string' } },
    required: ['city'],
    additionalProperties: false,
  }),
  execute: async ({ city }) => {
    assert.equal(city, 'Paris');
    return 'sunny, 21C';
  },
});

async function models() {
  // The AI SDK has no model-listing call for OpenAI-compatible providers;
  // this uses the HTTP helper its providers are built on, with the same
  // base URL and key, so that errors come back as its APICallError.
  const list = (apiKey) =>
    getFromApi({
      url: `${BASE_URL}/models`,
      headers: { Authorization: `Bearer ${apiKey}` },
      successfulResponseHandler: createJsonResponseHandler(schema({ type: 'object' })),
      failedResponseHandler: createJsonErrorResponseHandler({
        errorSchema: schema({ type: 'object' }),
        errorToMessage: d => d.error.message,
      }),
    });
  const { value } = await list(KEY);
  assert.deepEqual(
    value.data.map(m => [m.id, m.owned_by]),
    [[MODEL, 'chatgate']],
  );
  const e = await rejection(list(BAD_KEY), '401');
  assert.ok(APICallError.isInstance(e), String(e));
  assert.equal(e.statusCode, 401);
  assert.equal(e.data.error.code, 'invalid_api_key');
}

async function nonStreamed() {
  const mark = (await journal()).length;
  const result = await generateText({
    model: model(),
    system: 'You are terse.',
    prompt: 'What is two plus two?',
    maxOutputTokens: 400,
    include: { requestBody: true },
  });
  assert.ok(result.text.startsWith('You said: What is two plus two?'), result.text);
  assert.equal(result.finishReason, 'stop');
  assert.equal(result.rawFinishReason, 'stop');
  // reasoning_content becomes reasoning parts, apart from the text.
  const step = result.finalStep;
  assert.equal(typeof step.reasoningText, 'string');
  assert.ok(step.reasoningText.length > 20);
  assert.ok(!result.text.includes(step.reasoningText));
  assert.deepEqual(
    result.content.map(p => p.type),
    ['reasoning', 'text'],
  );
  const u = result.usage;
  assert.ok(u.inputTokens > 0 && u.outputTokens > 0);
  assert.equal(u.totalTokens, u.inputTokens + u.outputTokens);
  assert.ok(u.outputTokenDetails.reasoningTokens > 0);
  assert.equal(u.outputTokenDetails.textTokens, u.outputTokens - u.outputTokenDetails.reasoningTokens);
  assert.ok(step.response.headers['x-request-id'].startsWith('req_'));
  // What it sent: the AI SDK reports its own request body.
  const sent = JSON.parse(step.request.body);
  assert.equal(sent.max_tokens, 400);
  assert.deepEqual(
    sent.messages.map(m => m.role),
    ['system', 'user'],
  );
  const [body] = await sentBodies(mark);
  assert.equal(body.max_tokens, 400);
}

async function streamed() {
  const mark = (await journal()).length;
  // No includeUsage on the provider, so no stream_options are sent; the
  // gateway adds include_usage and the usage chunk still arrives.
  const result = streamText({ model: model(), prompt: 'Why is the sky blue?' });
  let reasoning = '';
  let text = '';
  let finish = null;
  const order = [];
  for await (const part of result.stream) {
    switch (part.type) {
      case 'reasoning-delta':
        reasoning += part.text;
        order.push('r');
        break;
      case 'text-delta':
        text += part.text;
        order.push('c');
        break;
      case 'finish':
        finish = part;
        break;
      case 'error':
        throw part.error;
    }
  }
  assert.ok(text.startsWith('You said: Why is the sky blue?'), text);
  assert.ok(reasoning.length > 20 && !text.includes(reasoning));
  assert.equal(order.join('').replace(/^r+c+$/, ''), '', 'reasoning, then text, never interleaved');
  assert.equal(finish.finishReason, 'stop');
  const u = finish.totalUsage;
  assert.ok(u.inputTokens > 0 && u.outputTokenDetails.reasoningTokens > 0, JSON.stringify(u));
  assert.equal(u.totalTokens, u.inputTokens + u.outputTokens);
  assert.equal(await result.text, text);
  assert.equal((await result.finalStep).reasoningText, reasoning);
  assert.deepEqual(await result.usage, u);
  const [body] = await sentBodies(mark);
  assert.equal(body.stream, true);
  assert.deepEqual(body.stream_options, { include_usage: true }, 'added by the gateway');

  // With includeUsage the provider asks for usage itself.
  const mark2 = (await journal()).length;
  const withUsage = streamText({ model: provider(KEY, { includeUsage: true })(MODEL), prompt: 'Why?' });
  assert.ok((await withUsage.usage).outputTokenDetails.reasoningTokens > 0);
  const [body2] = await sentBodies(mark2);
  assert.deepEqual(body2.stream_options, { include_usage: true });
}

async function toolRoundTrip() {
  // generateText runs the loop itself: tool call, execute, tool message, answer.
  const mark = (await journal()).length;
  const result = await generateText({
    model: model(),
    prompt: 'Paris',
    tools: { get_weather: weather },
    stopWhen: isStepCount(2),
    include: { requestBody: true },
  });
  assert.equal(result.steps.length, 2);
  const [first, second] = result.steps;
  assert.equal(first.finishReason, 'tool-calls');
  assert.equal(first.toolCalls.length, 1);
  assert.equal(first.toolCalls[0].toolName, 'get_weather');
  assert.deepEqual(first.toolCalls[0].input, { city: 'Paris' });
  assert.equal(first.toolResults[0].output, 'sunny, 21C');
  assert.equal(second.finishReason, 'stop');
  assert.ok(result.text.startsWith('The tool returned: sunny, 21C'), result.text);
  const bodies = await sentBodies(mark);
  assert.equal(bodies.length, 2);
  const [user, assistant, toolMsg] = bodies[1].messages;
  assert.deepEqual(user, { role: 'user', content: 'Paris' });
  assert.equal(assistant.role, 'assistant');
  assert.equal(assistant.tool_calls[0].id, first.toolCalls[0].toolCallId);
  // The SDK sends the reasoning back on the assistant turn; the gateway
  // strips it before the provider.
  assert.ok('reasoning_content' in JSON.parse(second.request.body).messages[1]);
  assert.ok(!('reasoning_content' in assistant));
  assert.deepEqual(toolMsg, {
    role: 'tool',
    tool_call_id: first.toolCalls[0].toolCallId,
    content: 'sunny, 21C',
  });

  // The same loop streamed: tool-call deltas assembled by the SDK.
  const s = streamText({
    model: model(),
    prompt: 'Paris',
    tools: { get_weather: weather },
    stopWhen: isStepCount(2),
  });
  const types = new Set();
  for await (const part of s.stream) {
    if (part.type === 'error') throw part.error;
    types.add(part.type);
  }
  for (const t of ['reasoning-delta', 'tool-input-start', 'tool-call', 'tool-result', 'text-delta']) {
    assert.ok(types.has(t), `no ${t} part: ${[...types]}`);
  }
  assert.ok((await s.text).startsWith('The tool returned: sunny, 21C'));
  assert.equal((await s.steps).length, 2);
}

async function image() {
  const mark = (await journal()).length;
  const uri = `data:image/png;base64,${PNG}`;
  const result = await generateText({
    model: model(),
    messages: [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'What is in this image?' },
          // A file part with an image media type (the "image" part is
          // deprecated in this version); a data: URL is inlined as is.
          { type: 'file', mediaType: 'image/png', data: new URL(uri) },
        ],
      },
    ],
  });
  assert.ok(result.text.startsWith('You said: What is in this image?'), result.text);
  const [body] = await sentBodies(mark);
  assert.deepEqual(body.messages[0].content, [
    { type: 'text', text: 'What is in this image?' },
    { type: 'image_url', image_url: { url: uri } },
  ]);
}

async function errors() {
  // 401 and 400 are not retryable: thrown unwrapped even with default retries.
  const e401 = await rejection(generateText({ model: model(BAD_KEY), prompt: 'hi' }), '401');
  assert.ok(APICallError.isInstance(e401), String(e401));
  assert.equal(e401.statusCode, 401);
  assert.equal(e401.isRetryable, false);
  assert.equal(e401.data.error.code, 'invalid_api_key');
  assert.equal(e401.data.error.type, 'authentication_error');

  const e400 = await rejection(generateText({ model: model(), prompt: 'hi', temperature: 5 }), '400');
  assert.ok(APICallError.isInstance(e400), String(e400));
  assert.equal(e400.statusCode, 400);
  assert.deepEqual(
    [e400.data.error.type, e400.data.error.code, e400.data.error.param],
    ['invalid_request_error', 'invalid_value', 'temperature'],
  );

  // Streamed, the same error arrives as an error part.
  const s = streamText({ model: model(), prompt: 'hi', temperature: 5, onError: () => {} });
  let streamError = null;
  for await (const part of s.stream) {
    if (part.type === 'error') streamError = part.error;
  }
  assert.ok(APICallError.isInstance(streamError), String(streamError));
  assert.equal(streamError.statusCode, 400);
  assert.equal(streamError.data.error.param, 'temperature');

  // 404 for an unknown model.
  const e404 = await rejection(generateText({ model: provider()('no-such-model'), prompt: 'hi' }), '404');
  assert.equal(e404.statusCode, 404);
  assert.equal(e404.data.error.code, 'model_not_found');

  // 502: providerOptions under the provider's name are the documented way
  // to add a body parameter; maxRetries: 0 for this call.
  const mark = (await journal()).length;
  const e502 = await rejection(
    generateText({
      model: model(),
      prompt: 'hi',
      maxRetries: 0,
      providerOptions: { chatgate: { x_sim: { fault: 'reject', status: 500 } } },
    }),
    '502',
  );
  assert.ok(APICallError.isInstance(e502), String(e502));
  assert.equal(e502.statusCode, 502);
  assert.equal(e502.isRetryable, true);
  assert.equal(e502.data.error.code, 'upstream_error');
  assert.equal(e502.data.error.type, 'upstream_error');
  assert.ok(e502.message.includes('HTTP 500'), e502.message);
  // The gateway tried its one endpoint three times; the SDK asked once.
  assert.equal((await journal()).length, mark + 3, 'retried although maxRetries: 0');
}

async function rateLimitRetry() {
  const limited = model(LIMITED_KEY);
  for (let attempt = 0; attempt < 3; attempt++) {
    let e429 = null;
    for (let i = 0; i < 200 && !e429; i++) {
      try {
        await generateText({ model: limited, prompt: 'ping', maxRetries: 0 });
      } catch (e) {
        if (!(APICallError.isInstance(e) && e.statusCode === 429)) throw e;
        e429 = e;
      }
    }
    assert.ok(e429, 'no 429 after 200 requests');
    assert.equal(e429.isRetryable, true);
    assert.equal(e429.data.error.code, 'rate_limit_exceeded');
    assert.equal(e429.responseHeaders['retry-after'], '1');
    const start = performance.now();
    const result = await generateText({ model: limited, prompt: 'ping' }); // maxRetries 2
    const elapsed = (performance.now() - start) / 1000;
    assert.ok(result.text.startsWith('You said: ping'));
    // Under 0.3 s there was no retry: the bucket refilled between the 429
    // and this call (a millisecond race); drain it again.
    if (elapsed < 0.3) {
      console.log(`rate limit: refilled before the retried call (attempt ${attempt}), again`);
      continue;
    }
    // Without Retry-After the SDK would wait its own 2 s backoff.
    assert.ok(elapsed >= 0.95 && elapsed < 1.9, String(elapsed));
    console.log(`rate limit: 429, Retry-After 1, retried, succeeded after ${elapsed.toFixed(3)}s`);
    console.log(`RETRY_ELAPSED_MS=${Math.round(elapsed * 1000)}`);
    return;
  }
  assert.fail('the bucket refilled before every retried call');
}

await run(`ai ${AI_VERSION} + @ai-sdk/openai-compatible ${PROVIDER_VERSION}`, [
  models,
  nonStreamed,
  streamed,
  toolRoundTrip,
  image,
  errors,
  rateLimitRetry,
]);
