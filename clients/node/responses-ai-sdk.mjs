// The Vercel AI SDK's OpenAI provider (its default model: the Responses
// API) against chatgate with kept responses, as a user runs it: `store`
// left at its default (true), so every earlier answer goes back as a bare
// `item_reference`. A multi-step tool loop through streamText, then a next
// turn with the whole history. Reads OPENAI_BASE_URL, OPENAI_API_KEY and
// CHATGATE_TEST_SIM_URL (the simulator, for what the provider was sent);
// exits non-zero on failure. Run by tests/tests/responses.rs.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { VERSION, createOpenAI } from '@ai-sdk/openai';
import { isStepCount, jsonSchema, streamText, tool } from 'ai';

const SIM_URL = process.env.CHATGATE_TEST_SIM_URL.replace(/\/+$/, '');
const AI = JSON.parse(readFileSync(new URL('./node_modules/ai/package.json', import.meta.url))).version;
console.log(`ai ${AI}, @ai-sdk/openai ${VERSION}`);

// The documented settings: a base URL and a key; nothing else.
const openai = createOpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY });
const model = openai('reasoning-model-k3');

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

async function sent() {
  const r = await fetch(`${SIM_URL}/_sim/journal`);
  return (await r.json()).map((e) => JSON.parse(e.body));
}

// The tool loop: the model calls the tool, the SDK runs it and sends the
// result back with the call given by reference to the kept response.
const messages = [{ role: 'user', content: 'Paris' }];
const loop = streamText({
  model,
  tools: { get_weather: weather },
  messages,
  stopWhen: isStepCount(3),
  include: { requestBody: true },
});
let streamed = '';
for await (const delta of loop.textStream) streamed += delta;
const steps = await loop.steps;
assert.equal(steps.length, 2, `steps: ${steps.length}`);
assert.equal(steps[0].toolCalls[0].toolName, 'get_weather');
assert.ok(streamed.startsWith('The tool returned: sunny, 21C'), streamed);
const second = steps[1].request.body;
const secondInput = typeof second === 'string' ? JSON.parse(second).input : second.input;
assert.ok(
  secondInput.some((i) => i.type === 'item_reference'),
  `no item reference in ${JSON.stringify(secondInput)}`,
);
// The provider got the call back in full: the reference stood for the
// reasoning item before it, the call itself came as it was.
const step2 = (await sent()).at(-1);
assert.ok(
  step2.messages.some((m) => m.role === 'assistant' && m.tool_calls) && step2.messages.at(-1).role === 'tool',
  JSON.stringify(step2.messages),
);
console.log('tool loop ok', JSON.stringify(secondInput.map((i) => i.type ?? i.role)));

// The next turn: the SDK sends the history it keeps (the question and the
// last step's answer), the answer and its reasoning as item references;
// the provider gets the answer itself.
// (The marker tells the simulator to answer in words, not call the tool.)
const history = [
  ...messages,
  ...(await loop.response).messages,
  { role: 'user', content: 'Thanks [[sim:tools=none]]' },
];
const next = streamText({ model, tools: { get_weather: weather }, messages: history, include: { requestBody: true } });
let text = '';
for await (const delta of next.textStream) text += delta;
assert.ok(text.startsWith('You said: Thanks'), text);
const body = (await next.steps)[0].request.body;
const input = typeof body === 'string' ? JSON.parse(body).input : body.input;
const refs = input.filter((i) => i.type === 'item_reference');
assert.ok(refs.length >= 2, JSON.stringify(input));
const last = (await sent()).at(-1);
const said = JSON.stringify(last.messages);
assert.ok(said.includes('The tool returned: sunny, 21C'), said);
console.log('next turn ok', refs.length, 'references');
