// The official Anthropic TypeScript SDK's Messages API against chatgate
// (--apis messages): a plain answer (the key as x-api-key), the same with
// the key as a bearer token, a streamed answer with thinking, a tool round
// trip, and a refusal in the Anthropic error shape. Run by
// tests/tests/messages.rs with ANTHROPIC_BASE_URL and CHATGATE_API_KEY set;
// exits non-zero on failure.

import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { VERSION } from '@anthropic-ai/sdk/version';

const MODEL = 'reasoning-model-k3';
const KEY = process.env.CHATGATE_API_KEY;
assert.ok(KEY, 'CHATGATE_API_KEY is not set');
const client = new Anthropic({ apiKey: KEY, maxRetries: 0 });
console.log(`anthropic (node) ${VERSION}`);

// Plain, the key as x-api-key: one text block, no thinking (not asked for).
let m = await client.messages.create({
  model: MODEL,
  max_tokens: 400,
  messages: [{ role: 'user', content: 'Why is the sky blue?' }],
});
assert.equal(m.type, 'message');
assert.deepEqual(m.content.map((b) => b.type), ['text']);
assert.ok(m.content[0].text.startsWith('You said: Why is the sky blue?'), m.content[0].text);
assert.equal(m.stop_reason, 'end_turn');
assert.ok(m.usage.input_tokens > 0 && m.usage.output_tokens > 0);
console.log('plain ok', m.id);

// The key as a bearer token (ANTHROPIC_AUTH_TOKEN's header).
const bearer = new Anthropic({ authToken: KEY, apiKey: null, maxRetries: 0 });
m = await bearer.messages.create({
  model: MODEL,
  max_tokens: 400,
  system: [{ type: 'text', text: 'Be brief.', cache_control: { type: 'ephemeral' } }],
  messages: [{ role: 'user', content: 'Hello' }],
});
assert.ok(m.content[0].text.startsWith('You said: Hello'), m.content[0].text);
console.log('bearer ok', m.id);

// Streamed, with thinking: the deltas add up to the final message.
let text = '';
let thinking = '';
const stream = client.messages.stream({
  model: MODEL,
  max_tokens: 2000,
  thinking: { type: 'enabled', budget_tokens: 1024 },
  messages: [{ role: 'user', content: [{ type: 'text', text: 'Tell me more' }] }],
});
stream.on('text', (t) => { text += t; });
stream.on('thinking', (t) => { thinking += t; });
const final = await stream.finalMessage();
assert.deepEqual(final.content.map((b) => b.type), ['thinking', 'text']);
assert.ok(thinking && final.content[0].thinking === thinking);
assert.ok(final.content[0].signature.startsWith('chatgate.v2.'), final.content[0].signature);
assert.ok(text.startsWith('You said: Tell me more') && final.content[1].text === text, text);
assert.equal(final.stop_reason, 'end_turn');
console.log('stream ok', final.id);

// A tool, streamed: the model calls it, the client answers, the model reads it.
const tools = [{
  name: 'get_weather',
  description: 'The weather in a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
}];
const first = await client.messages.stream({
  model: MODEL,
  max_tokens: 2000,
  thinking: { type: 'enabled', budget_tokens: 1024 },
  tools,
  messages: [{ role: 'user', content: 'Paris' }],
}).finalMessage();
assert.equal(first.stop_reason, 'tool_use');
const calls = first.content.filter((b) => b.type === 'tool_use');
assert.equal(calls.length, 1);
assert.equal(calls[0].name, 'get_weather');
assert.deepEqual(calls[0].input, { city: 'Paris' });
const second = await client.messages.create({
  model: MODEL,
  max_tokens: 2000,
  tools,
  messages: [
    { role: 'user', content: 'Paris' },
    { role: 'assistant', content: first.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: calls[0].id, content: [{ type: 'text', text: 'sunny 21C' }] }] },
  ],
});
assert.ok(second.content.at(-1).text.startsWith('The tool returned: sunny 21C'), second.content);
console.log('tool ok', second.id);

// A refusal names the Messages field, in the Anthropic error shape.
await assert.rejects(
  client.messages.create({
    model: MODEL,
    max_tokens: 10,
    stop_sequences: ['a', 'b', 'c', 'd', 'e'],
    messages: [{ role: 'user', content: 'x' }],
  }),
  (e) => {
    assert.ok(e instanceof Anthropic.BadRequestError, String(e));
    assert.equal(e.error.type, 'error');
    assert.equal(e.error.error.type, 'invalid_request_error');
    assert.ok(e.error.error.message.includes('stop_sequences'), e.error.error.message);
    return true;
  },
);
console.log('refusal ok');
