"""A stream cut mid-answer and finished by chatgate (--stream-resume), read
by the OpenAI Python SDK's stream helper (which concatenates every string
field of the deltas: a second role would read "assistantassistant") and by
the Anthropic Python SDK's message stream. Prints one JSON line per client
with what it assembled. Reads CHATGATE_BASE_URL (the gateway, without
/v1), CHATGATE_API_KEY, CHATGATE_MODEL and CHATGATE_PROMPT; exits non-zero
on any failure."""
import json
import os

import anthropic
import openai
from anthropic import Anthropic
from openai import OpenAI

BASE = os.environ["CHATGATE_BASE_URL"]
KEY = os.environ["CHATGATE_API_KEY"]
MODEL = os.environ["CHATGATE_MODEL"]
PROMPT = os.environ["CHATGATE_PROMPT"]
MESSAGES = [{"role": "user", "content": PROMPT}]

client = OpenAI(base_url=f"{BASE}/v1", api_key=KEY, max_retries=0)
with client.chat.completions.stream(
    model=MODEL, messages=MESSAGES, stream_options={"include_usage": True}
) as stream:
    for _ in stream:
        pass
    c = stream.get_final_completion()
m = c.choices[0].message
print(json.dumps({
    "client": f"openai (python) {openai.__version__}",
    "id": c.id,
    "role": m.role,
    "text": m.content,
    "finish": c.choices[0].finish_reason,
    "completion_tokens": c.usage.completion_tokens,
}))

ant = Anthropic(base_url=BASE, api_key=KEY, max_retries=0)
with ant.messages.stream(model=MODEL, max_tokens=1000, messages=MESSAGES) as stream:
    msg = stream.get_final_message()
print(json.dumps({
    "client": f"anthropic (python) {anthropic.__version__}",
    "id": msg.id,
    "role": msg.role,
    "text": "".join(b.text for b in msg.content if b.type == "text"),
    "finish": msg.stop_reason,
    "completion_tokens": msg.usage.output_tokens,
}))
