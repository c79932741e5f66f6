// The official OpenAI Node SDK's kept responses against chatgate (--apis
// responses, the store on): three turns chained by previous_response_id
// with a function tool round trip, retrieve, input_items paged by the SDK,
// delete; a background run polled, one streamed, left, and re-attached
// with starting_after, one cancelled. Run by tests/tests/responses.rs with
// OPENAI_BASE_URL and OPENAI_API_KEY set; exits non-zero on failure.

import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { VERSION } from 'openai/version';

const MODEL = 'reasoning-model-k3';
const client = new OpenAI({ maxRetries: 0 });
console.log(`openai (node) ${VERSION}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// The simulator's pace, for background runs (the marker is its own).
const SLOW = '[[sim:token_ms=20,reasoning_tokens=20,answer_tokens=60]]';
const SLOWER = '[[sim:token_ms=50,reasoning_tokens=20,answer_tokens=400]]';

const tools = [{
  type: 'function',
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  strict: false,
}];

// Three turns: a tool call, its output alone, a question alone.
const r1 = await client.responses.create({ model: MODEL, input: 'Paris', tools });
const call = r1.output.find((i) => i.type === 'function_call');
assert.ok(call && r1.store === true, JSON.stringify(r1));
const r2 = await client.responses.create({
  model: MODEL,
  tools,
  previous_response_id: r1.id,
  input: [{ type: 'function_call_output', call_id: call.call_id, output: 'sunny 21C' }],
});
assert.ok(r2.output_text.startsWith('The tool returned: sunny 21C'), r2.output_text);
const r3 = await client.responses.create({ model: MODEL, previous_response_id: r2.id, input: 'And tomorrow?' });
assert.ok(r3.output_text.startsWith('You said: And tomorrow?'), r3.output_text);
assert.equal(r3.previous_response_id, r2.id);
console.log('chain ok');

const got = await client.responses.retrieve(r3.id);
assert.equal(got.output_text, r3.output_text);
const items = [];
for await (const item of client.responses.inputItems.list(r3.id, { order: 'asc', limit: 2 })) items.push(item);
assert.equal(items[0].content[0].text, 'Paris');
assert.ok(items.some((i) => i.type === 'function_call_output'));
assert.equal(items.at(-1).content[0].text, 'And tomorrow?');
await client.responses.delete(r3.id);
await assert.rejects(client.responses.retrieve(r3.id), (e) => e.status === 404);
console.log('retrieve ok', items.length);

// Background: polled to the end.
let run = await client.responses.create({ model: MODEL, input: `A story ${SLOW}`, background: true });
assert.equal(run.status, 'queued');
const deadline = Date.now() + 30_000;
while (['queued', 'in_progress'].includes(run.status) && Date.now() < deadline) {
  await sleep(100);
  run = await client.responses.retrieve(run.id);
}
assert.equal(run.status, 'completed');
assert.ok(run.output_text.startsWith('You said: A story'), run.output_text);

// Streamed, left after a few events, re-attached after the last one.
const stream = await client.responses.create({ model: MODEL, input: `More ${SLOW}`, background: true, stream: true });
const seen = [];
let id;
for await (const event of stream) {
  seen.push(event.sequence_number);
  if (event.type === 'response.created') id = event.response.id;
  if (seen.length === 4) break;
}
stream.controller.abort();
const later = [];
let last;
const resumed = await client.responses.retrieve(id, { stream: true, starting_after: seen.at(-1) });
for await (const event of resumed) {
  later.push(event.sequence_number);
  last = event;
}
assert.equal(later[0], seen.at(-1) + 1);
assert.equal(last.type, 'response.completed');

// Cancelled while it runs.
const long = await client.responses.create({ model: MODEL, input: `Long ${SLOWER}`, background: true });
await sleep(500);
const cancelled = await client.responses.cancel(long.id);
assert.equal(cancelled.status, 'cancelled');
assert.equal((await client.responses.retrieve(long.id)).status, 'cancelled');
console.log('background ok', seen.length, '+', later.length);
