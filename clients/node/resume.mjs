// A stream cut mid-answer and finished by chatgate (--stream-resume), read
// by the OpenAI Node SDK's stream helper (which takes a new chunk id as the
// answer's, and throws on a call's changed identity). Prints one JSON line
// with what it assembled. Reads CHATGATE_BASE_URL (the gateway, without
// /v1), CHATGATE_API_KEY, CHATGATE_MODEL and CHATGATE_PROMPT; exits
// non-zero on any failure.
import OpenAI from "openai";
import { VERSION } from "openai/version";

const client = new OpenAI({
  baseURL: `${process.env.CHATGATE_BASE_URL}/v1`,
  apiKey: process.env.CHATGATE_API_KEY,
  maxRetries: 0,
});
const stream = client.chat.completions.stream({
  model: process.env.CHATGATE_MODEL,
  messages: [{ role: "user", content: process.env.CHATGATE_PROMPT }],
  stream_options: { include_usage: true },
});
for await (const _ of stream) {
  // The helper assembles the answer.
}
const c = await stream.finalChatCompletion();
console.log(
  JSON.stringify({
    client: `openai (node) ${VERSION}`,
    id: c.id,
    role: c.choices[0].message.role,
    text: c.choices[0].message.content,
    finish: c.choices[0].finish_reason,
    completion_tokens: c.usage?.completion_tokens,
  }),
);
