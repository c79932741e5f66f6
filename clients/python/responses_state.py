"""The OpenAI Python SDK's kept responses against chatgate (--apis responses,
the store on): three turns chained by previous_response_id with a function
tool round trip, an item reference, retrieve, input_items paging, delete, and
another key's view of all of it. Reads OPENAI_BASE_URL, OPENAI_API_KEY and
OTHER_API_KEY (a second key); exits non-zero on any failure."""
import os
import sys

import openai
from openai import OpenAI

MODEL = "reasoning-model-k3"
client = OpenAI(max_retries=0)
other = OpenAI(max_retries=0, api_key=os.environ["OTHER_API_KEY"])
print(f"openai (python) {openai.__version__}")

tools = [{
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}]

# Turn 1: the model calls the tool; the response is kept (store defaults to true).
r1 = client.responses.create(model=MODEL, input="Paris", tools=tools)
calls = [item for item in r1.output if item.type == "function_call"]
assert len(calls) == 1 and calls[0].name == "get_weather", r1.output
assert r1.store is True and r1.previous_response_id is None, r1

# Turn 2: only the tool's output; the rest is the kept conversation.
r2 = client.responses.create(
    model=MODEL,
    tools=tools,
    previous_response_id=r1.id,
    input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny 21C"}],
)
assert r2.output_text.startswith("The tool returned: sunny 21C"), r2.output_text
assert r2.previous_response_id == r1.id, r2

# Turn 3, streamed, continues turn 2.
text = ""
with client.responses.stream(model=MODEL, previous_response_id=r2.id, input="And tomorrow?") as stream:
    for event in stream:
        if event.type == "response.output_text.delta":
            text += event.delta
    r3 = stream.get_final_response()
assert r3.status == "completed" and text == r3.output_text, (text, r3)
assert text.startswith("You said: And tomorrow?"), text
print("chain ok", r1.id, r2.id, r3.id)

# Retrieve: the same response object.
got = client.responses.retrieve(r3.id)
assert got.id == r3.id and got.output_text == r3.output_text, got
assert got.previous_response_id == r2.id and got.usage.output_tokens == r3.usage.output_tokens, got
print("retrieve ok")

# Input items: the whole conversation before turn 3's answer, paged two at a time.
items = list(client.responses.input_items.list(r3.id, order="asc", limit=2))
kinds = [i.type for i in items]
assert kinds[0] == "message" and items[0].role == "user", kinds
assert "function_call" in kinds and "function_call_output" in kinds, kinds
assert items[-1].type == "message" and items[-1].content[0].text == "And tomorrow?", items[-1]
newest = client.responses.input_items.list(r3.id, limit=1)
assert newest.data[0].id == items[-1].id and newest.has_more, newest
print("input items ok", len(items))

# An item reference: turn 2's answer, by id, in a request that is not kept.
answer = [i for i in r2.output if i.type == "message"][0]
r4 = client.responses.create(
    model=MODEL,
    store=False,
    input=[{"type": "item_reference", "id": answer.id}, {"role": "user", "content": "Thanks"}],
)
assert r4.output_text.startswith("You said: Thanks") and r4.store is False, r4
try:
    client.responses.retrieve(r4.id)
    sys.exit("a response with store false was kept")
except openai.NotFoundError:
    pass
print("reference ok")

# Another key sees none of it: every call is a 404, worded as for an id
# that never existed.
for call in [
    lambda: other.responses.retrieve(r3.id),
    lambda: other.responses.delete(r3.id),
    lambda: list(other.responses.input_items.list(r3.id)),
    lambda: other.responses.create(model=MODEL, input="x", previous_response_id=r3.id),
    lambda: other.responses.create(
        model=MODEL, input=[{"type": "item_reference", "id": answer.id}]
    ),
]:
    try:
        call()
        sys.exit("another key reached a kept response")
    except openai.NotFoundError as e:
        assert "not found" in e.body["message"], e.body
never = "resp_" + "0" * 24
try:
    client.responses.create(model=MODEL, input="x", previous_response_id=never)
    sys.exit("an unknown previous_response_id was accepted")
except openai.NotFoundError as e:
    assert e.body["code"] == "previous_response_not_found", e.body
    assert e.body["param"] == "previous_response_id", e.body
print("scoped ok")

# Delete: gone for good; the conversation after it can no longer continue.
client.responses.delete(r2.id)
for call in [
    lambda: client.responses.retrieve(r2.id),
    lambda: client.responses.delete(r2.id),
]:
    try:
        call()
        sys.exit("a deleted response is still there")
    except openai.NotFoundError:
        pass
try:
    client.responses.create(model=MODEL, input="x", previous_response_id=r3.id)
    sys.exit("a conversation with a deleted response was continued")
except openai.NotFoundError as e:
    assert r2.id in e.body["message"], e.body
print("delete ok")
