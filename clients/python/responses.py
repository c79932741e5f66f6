"""The OpenAI Python SDK's Responses API against chatgate (--apis responses):
a plain answer, a streamed one, and a function tool round trip.
Reads OPENAI_BASE_URL and OPENAI_API_KEY; exits non-zero on any failure."""
import json
import sys

import openai
from openai import OpenAI

MODEL = "reasoning-model-k3"
client = OpenAI(max_retries=0)
print(f"openai (python) {openai.__version__}")

# Plain: reasoning, then the message.
r = client.responses.create(model=MODEL, input="Why is the sky blue?", max_output_tokens=400)
assert r.status == "completed", r
kinds = [item.type for item in r.output]
assert kinds == ["reasoning", "message"], kinds
assert r.output_text.startswith("You said: Why is the sky blue?"), r.output_text
assert r.usage.output_tokens > 0 and r.usage.input_tokens > 0, r.usage
assert r.usage.output_tokens_details.reasoning_tokens > 0, r.usage
print("plain ok", r.id)

# Streamed: the deltas add up to the final text.
text = ""
reasoning = ""
final = None
with client.responses.stream(model=MODEL, input=[{"role": "user", "content": "Tell me more"}]) as stream:
    for event in stream:
        if event.type == "response.output_text.delta":
            text += event.delta
        elif event.type == "response.reasoning_summary_text.delta":
            reasoning += event.delta
    final = stream.get_final_response()
assert final.status == "completed", final
assert text == final.output_text, (text, final.output_text)
assert text.startswith("You said: Tell me more"), text
assert reasoning and reasoning == final.output[0].summary[0].text, reasoning
print("stream ok", final.id)

# A function tool: the model calls it, the client answers, the model reads it.
tools = [{
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}]
first = client.responses.create(model=MODEL, input="Paris", tools=tools)
calls = [item for item in first.output if item.type == "function_call"]
assert len(calls) == 1 and calls[0].name == "get_weather", first.output
args = json.loads(calls[0].arguments)
assert args == {"city": "Paris"}, args
second = client.responses.create(
    model=MODEL,
    tools=tools,
    input=[
        {"role": "user", "content": "Paris"},
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny 21C"},
    ],
)
assert second.output_text.startswith("The tool returned: sunny 21C"), second.output_text
print("tool ok", second.id)

# A refusal names the Responses field.
try:
    client.responses.create(model=MODEL, input="x", previous_response_id=first.id)
    sys.exit("previous_response_id was accepted")
except openai.BadRequestError as e:
    assert e.body["param"] == "previous_response_id", e.body
print("refusal ok")
