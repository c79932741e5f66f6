"""The OpenAI Python SDK's background responses against chatgate (--apis
responses, the store on): polled to completion; streamed, the client gone
mid-stream and back with starting_after; cancelled (and cancelled again,
unchanged); a response that is not a background one cannot be cancelled.
Reads OPENAI_BASE_URL and OPENAI_API_KEY; exits non-zero on any failure."""
import sys
import time

import openai
from openai import OpenAI

MODEL = "reasoning-model-k3"
client = OpenAI(max_retries=0)
print(f"openai (python) {openai.__version__}")
# The simulator's pace: a few seconds of tokens (the marker is its own).
SLOW = "[[sim:token_ms=20,reasoning_tokens=20,answer_tokens=60]]"
SLOWER = "[[sim:token_ms=50,reasoning_tokens=20,answer_tokens=400]]"

# Polled: queued at once, then in progress, then completed.
r = client.responses.create(model=MODEL, input=f"Tell me a story {SLOW}", background=True)
assert r.status == "queued" and r.background is True, r
seen = {r.status}
deadline = time.time() + 30
while r.status in ("queued", "in_progress") and time.time() < deadline:
    time.sleep(0.1)
    r = client.responses.retrieve(r.id)
    seen.add(r.status)
assert r.status == "completed", r
assert r.output_text.startswith("You said: Tell me a story"), r.output_text
assert r.usage.output_tokens > 0, r.usage
assert "in_progress" in seen, seen
print("poll ok", sorted(seen))

# Streamed, left after a few events, re-attached after the last one seen.
stream = client.responses.create(model=MODEL, input=f"Another story {SLOW}", background=True, stream=True)
numbers = []
rid = None
for event in stream:
    numbers.append(event.sequence_number)
    if event.type == "response.created":
        rid = event.response.id
    if len(numbers) == 6:
        break
stream.close()
assert rid and numbers == list(range(6)), numbers
text = ""
later = []
last = None
for event in client.responses.retrieve(rid, stream=True, starting_after=numbers[-1]):
    later.append(event.sequence_number)
    if event.type == "response.output_text.delta":
        text += event.delta
    last = event
assert later[0] == numbers[-1] + 1 and later == list(range(later[0], later[0] + len(later))), later
assert last.type == "response.completed", last
done = client.responses.retrieve(rid)
assert done.status == "completed" and done.output_text.endswith(text), (done.output_text, text)
# From the store, once ended: the same events again, from any point.
again = [e.sequence_number for e in client.responses.retrieve(rid, stream=True, starting_after=2)]
assert again == list(range(3, later[-1] + 1)), again
print("resume ok", len(numbers), "+", len(later))

# Cancelled while it runs: the provider is left, the response says so.
r = client.responses.create(model=MODEL, input=f"A long story {SLOWER}", background=True)
time.sleep(0.5)
cancelled = client.responses.cancel(r.id)
assert cancelled.status == "cancelled", cancelled
assert client.responses.retrieve(r.id).status == "cancelled"
# Cancelling it again: unchanged.
assert client.responses.cancel(r.id).status == "cancelled"
# Not a background response: refused.
plain = client.responses.create(model=MODEL, input="x")
try:
    client.responses.cancel(plain.id)
    sys.exit("a response that is not a background one was cancelled")
except openai.BadRequestError as e:
    assert "background" in e.body["message"], e.body
print("cancel ok", r.id)

# Deleted while it runs: it stays deleted when the run ends (here: when a
# cancel stops it, which then finds nothing to answer with).
r = client.responses.create(model=MODEL, input=f"Gone {SLOWER}", background=True)
time.sleep(0.3)
client.responses.delete(r.id)
for call in [lambda: client.responses.cancel(r.id), lambda: client.responses.retrieve(r.id)]:
    try:
        call()
        sys.exit("a deleted background response came back")
    except openai.NotFoundError:
        pass
print("delete ok")
