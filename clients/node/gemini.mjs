// Google's Gen AI TypeScript SDK (`@google/genai`) on the Gemini API
// against chatgate (--apis gemini): a plain answer, a streamed answer
// (chunks collected, the last one with finishReason and usageMetadata), a
// function-calling round trip (the functionResponse sent back with the
// call's id), a token count, the model list, and refusals (an unknown
// model: 404, a bad key: 401) as the SDK's ApiError. Reads
// GOOGLE_GEMINI_BASE_URL (the gateway's root, http://HOST:PORT: the SDK
// adds /v1beta), CHATGATE_API_KEY and CHATGATE_MODEL (default
// reasoning-model-k3); exits non-zero on failure, else prints `... ok`
// per step and one JSON line of results.

import assert from 'node:assert/strict';
import { ApiError, FinishReason, GoogleGenAI } from '@google/genai';
import { readFileSync } from 'node:fs';

// The package exports no version and not its package.json: read the file.
const { version: VERSION } = JSON.parse(
  readFileSync(new URL('./node_modules/@google/genai/package.json', import.meta.url), 'utf8'),
);
const MODEL = process.env.CHATGATE_MODEL || 'reasoning-model-k3';
const BASE_URL = process.env.GOOGLE_GEMINI_BASE_URL;
const KEY = process.env.CHATGATE_API_KEY;
assert.ok(BASE_URL, 'GOOGLE_GEMINI_BASE_URL is not set');
assert.ok(KEY, 'CHATGATE_API_KEY is not set');
const ai = new GoogleGenAI({ apiKey: KEY, httpOptions: { baseUrl: BASE_URL } });
console.log(`@google/genai (node) ${VERSION}`);
const results = { sdk: '@google/genai', version: VERSION };

/** The non-thought text of a response's first candidate. */
function answerText(r) {
  return (r.candidates?.[0]?.content?.parts ?? [])
    .filter((p) => typeof p.text === 'string' && !p.thought)
    .map((p) => p.text)
    .join('');
}

// Plain: one answer, STOP, usage counted; a system instruction and an
// output cap go along.
const plain = await ai.models.generateContent({
  model: MODEL,
  contents: 'Why is the sky blue?',
  config: { systemInstruction: 'Be brief.', maxOutputTokens: 400 },
});
assert.ok(plain.text?.startsWith('You said: Why is the sky blue?'), JSON.stringify(plain));
assert.equal(plain.candidates[0].finishReason, FinishReason.STOP);
assert.equal(plain.candidates[0].content.role, 'model');
const u = plain.usageMetadata;
assert.ok(u.promptTokenCount > 0 && u.candidatesTokenCount > 0, JSON.stringify(u));
assert.ok(u.totalTokenCount >= u.promptTokenCount + u.candidatesTokenCount, JSON.stringify(u));
results.plain = { text: plain.text, finishReason: plain.candidates[0].finishReason, usage: u };
console.log('plain ok', plain.responseId ?? '');

// Streamed: the chunks' texts add up to the answer; the finishReason
// (STOP) and the usage come at the end (on the last chunk, as Google sends
// them, or the finish and then a usage-only chunk).
const stream = await ai.models.generateContentStream({
  model: MODEL,
  contents: [{ role: 'user', parts: [{ text: 'Tell me more' }] }],
});
let text = '';
let chunks = 0;
let finish;
let usage;
for await (const chunk of stream) {
  chunks += 1;
  const t = answerText(chunk);
  assert.ok(finish === undefined || t === '', `text after the finish: ${JSON.stringify(chunk)}`);
  text += t;
  finish = chunk.candidates?.[0]?.finishReason ?? finish;
  usage = chunk.usageMetadata ?? usage;
}
assert.ok(chunks >= 2, `${chunks} chunk(s)`);
assert.ok(text.startsWith('You said: Tell me more'), text);
assert.equal(finish, FinishReason.STOP);
assert.ok(usage?.promptTokenCount > 0 && usage?.candidatesTokenCount > 0, JSON.stringify(usage));
results.stream = { chunks, text, finishReason: finish, usage };
console.log('stream ok', chunks, 'chunks');

// A function: the model calls it (the simulator calls a declared tool with
// the user's words as its first argument), the client answers with the
// call's id, the model reads the answer.
const tools = [{
  functionDeclarations: [{
    name: 'get_weather',
    description: 'The weather in a city',
    parametersJsonSchema: {
      type: 'object',
      properties: { city: { type: 'string' } },
      required: ['city'],
    },
  }],
}];
const question = { role: 'user', parts: [{ text: 'Paris' }] };
const first = await ai.models.generateContent({ model: MODEL, contents: [question], config: { tools } });
const calls = first.functionCalls;
assert.equal(calls?.length, 1, JSON.stringify(first));
assert.equal(calls[0].name, 'get_weather');
assert.deepEqual(calls[0].args, { city: 'Paris' });
assert.ok(calls[0].id, `the call has an id: ${JSON.stringify(calls[0])}`);
assert.equal(first.candidates[0].finishReason, FinishReason.STOP);
const second = await ai.models.generateContent({
  model: MODEL,
  config: { tools },
  contents: [
    question,
    first.candidates[0].content, // the model's turn as it came (thoughtSignature included)
    {
      role: 'user',
      parts: [{ functionResponse: { id: calls[0].id, name: 'get_weather', response: { result: 'sunny 21C' } } }],
    },
  ],
});
assert.equal(second.functionCalls, undefined, JSON.stringify(second));
assert.ok(second.text?.startsWith('The tool returned:') && second.text.includes('sunny 21C'), second.text);
results.tool = { call: calls[0], answer: second.text };
console.log('tool ok', calls[0].id);

// A token count: a positive total, not an answer.
const count = await ai.models.countTokens({ model: MODEL, contents: 'Why is the sky blue?' });
assert.ok(count.totalTokens > 0, JSON.stringify(count));
results.count = count.totalTokens;
console.log('count ok', count.totalTokens);

// The catalogue: GET /v1beta/models, paged by the SDK; the model is there
// under its resource name.
const names = [];
for await (const m of await ai.models.list()) names.push(m.name);
assert.ok(names.includes(`models/${MODEL}`), JSON.stringify(names));
results.models = names;
console.log('models ok', names.length);

// Refusals, as ApiError with the HTTP status; the message is the Gemini
// error body as JSON.
async function refused(promise) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof ApiError, String(e));
    return { status: e.status, error: JSON.parse(e.message).error };
  }
  assert.fail('expected an ApiError');
}
const missing = await refused(ai.models.generateContent({ model: 'no-such-model', contents: 'x' }));
assert.equal(missing.status, 404, JSON.stringify(missing));
assert.equal(missing.error.code, 404);
assert.equal(missing.error.status, 'NOT_FOUND');
const badKey = new GoogleGenAI({ apiKey: 'not-a-key', httpOptions: { baseUrl: BASE_URL } });
const unauthorized = await refused(badKey.models.generateContent({ model: MODEL, contents: 'x' }));
assert.equal(unauthorized.status, 401, JSON.stringify(unauthorized));
assert.equal(unauthorized.error.code, 401);
assert.equal(unauthorized.error.status, 'UNAUTHENTICATED');
results.errors = { missing, unauthorized };
console.log('error ok');
console.log(JSON.stringify(results));
