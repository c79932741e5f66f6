"""Google's Gen AI Python SDK (`google-genai`) on the Gemini API against
chatgate (--apis gemini): a plain answer, a streamed answer (chunks
collected, the last one with finish_reason and usage_metadata), a
function-calling round trip (the function_response sent back with the
call's id), a token count, the model list, and refusals (an unknown model:
404, a bad key: 401) as the SDK's ClientError.
Reads GOOGLE_GEMINI_BASE_URL (the gateway's root, http://HOST:PORT: the SDK
adds /v1beta), CHATGATE_API_KEY and CHATGATE_MODEL (default
reasoning-model-k3); exits non-zero on any failure, else
prints `... ok` per step and one JSON line of results.
(Not named gemini.py or google*.py: it would shadow the packages.)"""
import json
import os

from google import genai
from google.genai import errors, types

MODEL = os.environ.get("CHATGATE_MODEL", "reasoning-model-k3")
BASE_URL = os.environ["GOOGLE_GEMINI_BASE_URL"]
KEY = os.environ["CHATGATE_API_KEY"]
# The SDK's default API version is v1 (since 2.x; GOOGLE_GENAI_API_VERSION
# overrides it): ask for v1beta, the version the Node SDK and Gemini CLI use.
HTTP = types.HttpOptions(base_url=BASE_URL, api_version="v1beta")
client = genai.Client(api_key=KEY, http_options=HTTP)
print(f"google-genai (python) {genai.__version__}")
results = {"sdk": "google-genai", "version": genai.__version__}


def answer_text(r):
    """The non-thought text of a response's first candidate."""
    cands = r.candidates or []
    parts = (cands[0].content.parts or []) if cands and cands[0].content else []
    return "".join(p.text for p in parts if p.text is not None and not p.thought)


# Plain: one answer, STOP, usage counted; a system instruction and an
# output cap go along.
plain = client.models.generate_content(
    model=MODEL,
    contents="Why is the sky blue?",
    config=types.GenerateContentConfig(system_instruction="Be brief.", max_output_tokens=400),
)
assert plain.text and plain.text.startswith("You said: Why is the sky blue?"), plain
assert plain.candidates[0].finish_reason == types.FinishReason.STOP, plain.candidates[0]
assert plain.candidates[0].content.role == "model", plain.candidates[0]
u = plain.usage_metadata
assert u.prompt_token_count > 0 and u.candidates_token_count > 0, u
assert u.total_token_count >= u.prompt_token_count + u.candidates_token_count, u
results["plain"] = {
    "text": plain.text,
    "finish_reason": plain.candidates[0].finish_reason.value,
    "usage": u.model_dump(exclude_none=True),
}
print("plain ok", plain.response_id or "")

# Streamed: the chunks' texts add up to the answer; the finish_reason
# (STOP) and the usage come at the end (on the last chunk, as Google sends
# them, or the finish and then a usage-only chunk).
text = ""
chunks = 0
finish = None
usage = None
for chunk in client.models.generate_content_stream(
    model=MODEL,
    contents=[types.Content(role="user", parts=[types.Part(text="Tell me more")])],
):
    chunks += 1
    t = answer_text(chunk)
    assert finish is None or not t, f"text after the finish: {chunk}"
    text += t
    if chunk.candidates and chunk.candidates[0].finish_reason:
        finish = chunk.candidates[0].finish_reason
    usage = chunk.usage_metadata or usage
assert chunks >= 2, chunks
assert text.startswith("You said: Tell me more"), text
assert finish == types.FinishReason.STOP, finish
assert usage and usage.prompt_token_count > 0 and usage.candidates_token_count > 0, usage
results["stream"] = {
    "chunks": chunks,
    "text": text,
    "finish_reason": finish.value,
    "usage": usage.model_dump(exclude_none=True),
}
print("stream ok", chunks, "chunks")

# A function: the model calls it (the simulator calls a declared tool with
# the user's words as its first argument), the client answers with the
# call's id, the model reads the answer. No automatic function calling:
# the declaration is a schema, not a Python callable.
tools = [types.Tool(function_declarations=[types.FunctionDeclaration(
    name="get_weather",
    description="The weather in a city",
    parameters_json_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)])]
config = types.GenerateContentConfig(tools=tools)
question = types.Content(role="user", parts=[types.Part(text="Paris")])
first = client.models.generate_content(model=MODEL, contents=[question], config=config)
calls = first.function_calls
assert calls and len(calls) == 1, first
assert calls[0].name == "get_weather", calls
assert calls[0].args == {"city": "Paris"}, calls[0].args
assert calls[0].id, f"the call has an id: {calls[0]}"
assert first.candidates[0].finish_reason == types.FinishReason.STOP, first.candidates[0]
second = client.models.generate_content(
    model=MODEL,
    config=config,
    contents=[
        question,
        first.candidates[0].content,  # the model's turn as it came (thought_signature included)
        types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
            id=calls[0].id, name="get_weather", response={"result": "sunny 21C"},
        ))]),
    ],
)
assert not second.function_calls, second
assert second.text.startswith("The tool returned:") and "sunny 21C" in second.text, second.text
results["tool"] = {"call": calls[0].model_dump(exclude_none=True), "answer": second.text}
print("tool ok", calls[0].id)

# A token count: a positive total, not an answer.
count = client.models.count_tokens(model=MODEL, contents="Why is the sky blue?")
assert count.total_tokens and count.total_tokens > 0, count
results["count"] = count.total_tokens
print("count ok", count.total_tokens)


# The catalogue: GET /v1beta/models, paged by the SDK; the model is there
# under its resource name.
names = [m.name for m in client.models.list()]
assert f"models/{MODEL}" in names, names
results["models"] = names
print("models ok", len(names))


# Refusals, as ClientError with the HTTP status as `code` and the Gemini
# error's `status` and `message`.
def refused(call):
    try:
        call()
    except errors.ClientError as e:
        return {"code": e.code, "status": e.status, "message": e.message}
    raise AssertionError("expected a ClientError")


missing = refused(lambda: client.models.generate_content(model="no-such-model", contents="x"))
assert missing["code"] == 404 and missing["status"] == "NOT_FOUND", missing
bad = genai.Client(api_key="not-a-key", http_options=HTTP)
unauthorized = refused(lambda: bad.models.generate_content(model=MODEL, contents="x"))
assert unauthorized["code"] == 401 and unauthorized["status"] == "UNAUTHENTICATED", unauthorized
results["errors"] = {"missing": missing, "unauthorized": unauthorized}
print("error ok")
print(json.dumps(results))
