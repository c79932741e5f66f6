// The official OpenAI Node SDK's Responses API against chatgate
// (--apis responses): a plain answer, a streamed one, a function tool round
// trip, and a refusal that names its field. Run by tests/tests/responses.rs
// with OPENAI_BASE_URL and OPENAI_API_KEY set; exits non-zero on failure.

import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { VERSION } from 'openai/version';

const MODEL = 'reasoning-model-k3';
const client = new OpenAI({ maxRetries: 0 });
console.log(`openai (node) ${VERSION}`);

// Plain: reasoning, then the message.
const r = await client.responses.create({ model: MODEL, input: 'Why is the sky blue?' });
assert.equal(r.status, 'completed');
assert.deepEqual(r.output.map((i) => i.type), ['reasoning', 'message']);
assert.ok(r.output_text.startsWith('You said: Why is the sky blue?'), r.output_text);
assert.ok(r.usage.output_tokens_details.reasoning_tokens > 0);
console.log('plain ok', r.id);

// Streamed: the deltas add up to the final text.
let text = '';
let reasoning = '';
const stream = client.responses.stream({ model: MODEL, input: [{ role: 'user', content: 'Tell me more' }] });
for await (const event of stream) {
  if (event.type === 'response.output_text.delta') text += event.delta;
  if (event.type === 'response.reasoning_summary_text.delta') reasoning += event.delta;
}
const final = await stream.finalResponse();
assert.equal(final.status, 'completed');
assert.equal(text, final.output_text);
assert.ok(text.startsWith('You said: Tell me more'), text);
assert.equal(reasoning, final.output[0].summary[0].text);
console.log('stream ok', final.id);

// A function tool round trip.
const tools = [{
  type: 'function',
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  strict: false,
}];
const first = await client.responses.create({ model: MODEL, input: 'Paris', tools });
const calls = first.output.filter((i) => i.type === 'function_call');
assert.equal(calls.length, 1);
assert.equal(calls[0].name, 'get_weather');
assert.deepEqual(JSON.parse(calls[0].arguments), { city: 'Paris' });
const second = await client.responses.create({
  model: MODEL,
  tools,
  input: [
    { role: 'user', content: 'Paris' },
    ...first.output,
    { type: 'function_call_output', call_id: calls[0].call_id, output: 'sunny 21C' },
  ],
});
assert.ok(second.output_text.startsWith('The tool returned: sunny 21C'), second.output_text);
console.log('tool ok', second.id);

// A refusal names the Responses field.
await assert.rejects(
  client.responses.create({ model: MODEL, input: 'x', previous_response_id: first.id }),
  (e) => e.status === 400 && e.param === 'previous_response_id',
);
console.log('refusal ok');
