"""The Anthropic Python SDK's Messages API against chatgate (--apis messages):
a plain answer (the key as x-api-key), a token count, the same answer with
the key as a bearer token, a streamed answer with thinking, a tool round
trip, and a refusal.
Reads ANTHROPIC_BASE_URL and CHATGATE_API_KEY; exits non-zero on any failure."""
import os
import sys

import anthropic
from anthropic import Anthropic

MODEL = "reasoning-model-k3"
KEY = os.environ["CHATGATE_API_KEY"]
client = Anthropic(api_key=KEY, max_retries=0)
print(f"anthropic (python) {anthropic.__version__}")

# Plain, the key as x-api-key: one text block, no thinking (not asked for).
m = client.messages.create(
    model=MODEL, max_tokens=400, messages=[{"role": "user", "content": "Why is the sky blue?"}]
)
assert m.type == "message" and m.role == "assistant", m
assert [b.type for b in m.content] == ["text"], m.content
assert m.content[0].text.startswith("You said: Why is the sky blue?"), m.content
assert m.stop_reason == "end_turn", m.stop_reason
assert m.usage.input_tokens > 0 and m.usage.output_tokens > 0, m.usage
print("plain ok", m.id)

# A token count: the gateway's upper bound of the prompt, not metered.
count = client.messages.count_tokens(
    model=MODEL, messages=[{"role": "user", "content": "Why is the sky blue?"}]
)
assert count.input_tokens >= m.usage.input_tokens, (count, m.usage)
print("count ok", count.input_tokens)

# The key as a bearer token (ANTHROPIC_AUTH_TOKEN's header).
bearer = Anthropic(auth_token=KEY, api_key=None, max_retries=0)
m = bearer.messages.create(
    model=MODEL, max_tokens=400, system="Be brief.", messages=[{"role": "user", "content": "Hello"}]
)
assert m.content[0].text.startswith("You said: Hello"), m.content
print("bearer ok", m.id)

# Streamed, with thinking: the deltas add up to the final message.
text = ""
thinking = ""
with client.messages.stream(
    model=MODEL,
    max_tokens=2000,
    thinking={"type": "enabled", "budget_tokens": 1024},
    messages=[{"role": "user", "content": [{"type": "text", "text": "Tell me more"}]}],
) as stream:
    for event in stream:
        if event.type == "content_block_delta" and event.delta.type == "text_delta":
            text += event.delta.text
        elif event.type == "content_block_delta" and event.delta.type == "thinking_delta":
            thinking += event.delta.thinking
    final = stream.get_final_message()
assert [b.type for b in final.content] == ["thinking", "text"], final.content
assert final.content[0].thinking == thinking and thinking, thinking
assert final.content[0].signature.startswith("chatgate.v2."), final.content[0]
assert final.content[1].text == text and text.startswith("You said: Tell me more"), text
assert final.stop_reason == "end_turn", final.stop_reason
assert final.usage.output_tokens > 0 and final.usage.input_tokens > 0, final.usage
print("stream ok", final.id)

# A tool: the model calls it, the client answers, the model reads it; the
# thinking block goes back as the client got it.
tools = [{
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}]
first = client.messages.create(
    model=MODEL,
    max_tokens=2000,
    thinking={"type": "enabled", "budget_tokens": 1024},
    tools=tools,
    messages=[{"role": "user", "content": "Paris"}],
)
assert first.stop_reason == "tool_use", first
calls = [b for b in first.content if b.type == "tool_use"]
assert len(calls) == 1 and calls[0].name == "get_weather", first.content
assert calls[0].input == {"city": "Paris"}, calls[0].input
second = client.messages.create(
    model=MODEL,
    max_tokens=2000,
    tools=tools,
    messages=[
        {"role": "user", "content": "Paris"},
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": calls[0].id, "content": "sunny 21C"},
        ]},
    ],
)
assert second.content[-1].text.startswith("The tool returned: sunny 21C"), second.content
print("tool ok", second.id)

# A refusal names the Messages field, in the Anthropic error shape.
try:
    client.messages.create(
        model=MODEL, max_tokens=10, stop_sequences=["a", "b", "c", "d", "e"],
        messages=[{"role": "user", "content": "x"}],
    )
    sys.exit("five stop sequences were accepted")
except anthropic.BadRequestError as e:
    assert e.body["type"] == "error", e.body
    assert e.body["error"]["type"] == "invalid_request_error", e.body
    assert "stop_sequences" in e.body["error"]["message"], e.body
print("refusal ok")
