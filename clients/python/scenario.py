"""The official OpenAI Python SDK, unmodified, against chatgate.

Run by tests/tests/clients.rs (see clients/README.md to run it by hand).
Plain asserts; exits non-zero on the first failure.

Environment:
  CHATGATE_TEST_BASE_URL     the gateway, http://HOST:PORT/v1
  CHATGATE_TEST_KEY          a valid key
  CHATGATE_TEST_LIMITED_KEY  a second key with requests_per_minute = 60,
                             used by nothing else (the 429 step drains it)
  CHATGATE_TEST_BROKE_KEY    a third key whose budget is zero (every
                             request is refused with insufficient_quota)
  CHATGATE_TEST_SIM_URL      the simulator, http://HOST:PORT (for its journal)
  OPENAI_BASE_URL, OPENAI_API_KEY
                             the same gateway and key, for the SDK's own
                             environment lookup (checked to match)
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request

import openai
from openai import OpenAI

BASE_URL = os.environ["CHATGATE_TEST_BASE_URL"]
KEY = os.environ["CHATGATE_TEST_KEY"]
LIMITED_KEY = os.environ["CHATGATE_TEST_LIMITED_KEY"]
BROKE_KEY = os.environ["CHATGATE_TEST_BROKE_KEY"]
SIM_URL = os.environ["CHATGATE_TEST_SIM_URL"].rstrip("/")
MODEL = "reasoning-model-k3"
# A 1x1 PNG.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def journal() -> list[dict]:
    with urllib.request.urlopen(f"{SIM_URL}/_sim/journal", timeout=10) as r:
        return json.load(r)


def sent_bodies(since: int) -> list[dict]:
    """The bodies the provider received after journal entry `since`."""
    return [json.loads(e["body"]) for e in journal()[since:]]


def extra(model: object, name: str) -> object:
    """A member the SDK's types do not declare (kept by its pydantic models)."""
    return (getattr(model, "model_extra", None) or {}).get(name)


def client(**kw) -> OpenAI:
    """A client configured through the documented constructor arguments."""
    return OpenAI(base_url=BASE_URL, api_key=KEY, **kw)


def step_environment_and_models() -> None:
    # The SDK reads OPENAI_BASE_URL and OPENAI_API_KEY when given nothing.
    assert os.environ["OPENAI_BASE_URL"] == BASE_URL
    assert os.environ["OPENAI_API_KEY"] == KEY
    env_client = OpenAI()
    assert str(env_client.base_url).rstrip("/") == BASE_URL.rstrip("/"), env_client.base_url
    models = list(env_client.models.list())
    assert [m.id for m in models] == [MODEL], models
    assert models[0].owned_by == "chatgate"
    assert models[0].object == "model"
    # The explicit configuration lists the same.
    assert [m.id for m in client().models.list()] == [MODEL]
    # And the environment client can chat.
    done = env_client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hello from the environment"}]
    )
    assert done.choices[0].message.content.startswith("You said: Hello from the environment")


def step_non_streamed() -> None:
    mark = len(journal())
    done = client().chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "What is two plus two?"},
        ],
        max_completion_tokens=400,
    )
    assert done.object == "chat.completion"
    assert done.model == MODEL
    assert done.id.startswith("chatcmpl-")
    assert done._request_id and done._request_id.startswith("req_"), done._request_id
    choice = done.choices[0]
    assert choice.finish_reason == "stop"
    msg = choice.message
    assert msg.role == "assistant"
    assert msg.content.startswith("You said: What is two plus two?"), msg.content
    # The SDK does not declare reasoning_content: it stays an extra member
    # of the message, apart from content.
    reasoning = extra(msg, "reasoning_content")
    assert isinstance(reasoning, str) and len(reasoning) > 20, reasoning
    assert getattr(msg, "reasoning_content") == reasoning
    assert reasoning not in msg.content and msg.content not in reasoning
    u = done.usage
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert u.completion_tokens_details.reasoning_tokens > 0
    assert u.completion_tokens > u.completion_tokens_details.reasoning_tokens
    (body,) = sent_bodies(mark)
    assert body["max_completion_tokens"] == 400, body
    assert [m["role"] for m in body["messages"]] == ["system", "user"], body
    assert "stream" not in body, body


def step_streamed() -> None:
    mark = len(journal())
    stream = client().chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Why is the sky blue?"}],
        stream=True,
    )
    reasoning, content, usage, finish, order = "", "", None, None, []
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        if not chunk.choices:
            # The usage chunk: choices empty, usage set. The SDK did not ask
            # for it (no stream_options); the gateway always does.
            assert chunk.usage is not None
            usage = chunk.usage
            continue
        delta = chunk.choices[0].delta
        r = extra(delta, "reasoning_content")
        if r:
            reasoning += r
            order.append("r")
        if delta.content:
            content += delta.content
            order.append("c")
        if chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    assert finish == "stop"
    assert content.startswith("You said: Why is the sky blue?"), content
    assert len(reasoning) > 20 and reasoning not in content
    # Reasoning first, then the answer, never interleaved.
    assert order == sorted(order, reverse=True) and order[0] == "r" and order[-1] == "c", order
    assert usage is not None and usage.completion_tokens_details.reasoning_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    (body,) = sent_bodies(mark)
    # The SDK sent no stream_options; the gateway added include_usage.
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}, body

    # The SDK's streaming helper, which accumulates the answer for you.
    with client().chat.completions.stream(
        model=MODEL,
        messages=[{"role": "user", "content": "Why is the sky blue?"}],
        stream_options={"include_usage": True},
    ) as s:
        deltas = ""
        for event in s:
            if event.type == "content.delta":
                deltas += event.delta
        final = s.get_final_completion()
    msg = final.choices[0].message
    assert msg.content == deltas == content, (msg.content, deltas)
    # The helper concatenates undeclared string members too.
    assert extra(msg, "reasoning_content") == reasoning, extra(msg, "reasoning_content")
    assert final.usage is not None and final.usage.total_tokens == usage.total_tokens


def step_tool_round_trip() -> None:
    c = client()
    messages: list = [{"role": "user", "content": "Paris"}]
    first = c.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER_TOOL])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}, call.function.arguments
    # The pattern of the SDK's own examples: append the returned message
    # object as it is (it carries reasoning_content, refusal: null, ...).
    messages.append(choice.message)
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny, 21C"})
    mark = len(journal())
    second = c.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER_TOOL])
    assert second.choices[0].finish_reason == "stop"
    answer = second.choices[0].message.content
    assert answer.startswith("The tool returned: sunny, 21C"), answer
    (body,) = sent_bodies(mark)
    assistant = body["messages"][1]
    assert assistant["role"] == "assistant" and assistant["tool_calls"][0]["id"] == call.id
    # The gateway strips reasoning_content from assistant turns.
    assert "reasoning_content" not in assistant, assistant
    assert body["messages"][2] == {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21C"}

    # The same first turn streamed through the helper: tool-call deltas.
    with c.chat.completions.stream(
        model=MODEL, messages=[{"role": "user", "content": "Paris"}], tools=[WEATHER_TOOL]
    ) as s:
        final = s.get_final_completion()
    (scall,) = final.choices[0].message.tool_calls
    assert final.choices[0].finish_reason == "tool_calls"
    assert scall.function.name == "get_weather" and scall.id == call.id
    assert json.loads(scall.function.arguments) == {"city": "Paris"}


def step_image() -> None:
    mark = len(journal())
    done = client().chat.completions.create(
        model=MODEL,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is in this image?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}", "detail": "low"}},
                ],
            }
        ],
    )
    assert done.choices[0].message.content.startswith("You said: What is in this image?")
    (body,) = sent_bodies(mark)
    part = body["messages"][0]["content"][1]
    assert part == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}", "detail": "low"}}, part


def step_errors() -> None:
    # 401: a key that does not exist.
    bad = OpenAI(base_url=BASE_URL, api_key="sk-cg-" + "0" * 43, max_retries=0)
    try:
        bad.models.list()
        raise AssertionError("no 401")
    except openai.AuthenticationError as e:
        assert e.status_code == 401 and e.code == "invalid_api_key" and e.type == "authentication_error", e
        assert e.request_id and e.request_id.startswith("req_")
    try:
        bad.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
        raise AssertionError("no 401")
    except openai.AuthenticationError as e:
        assert e.status_code == 401 and e.code == "invalid_api_key", e

    # 400 with param, non-streamed and streamed.
    for stream in (False, True):
        try:
            client().chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], temperature=5, stream=stream
            )
            raise AssertionError("no 400")
        except openai.BadRequestError as e:
            assert e.status_code == 400, e
            assert (e.type, e.code, e.param) == ("invalid_request_error", "invalid_value", "temperature"), e.body

    # 404 for an unknown model.
    try:
        client().chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
        raise AssertionError("no 404")
    except openai.NotFoundError as e:
        assert e.code == "model_not_found", e.body

    # 502: the provider fails; extra_body is the documented way to send a
    # parameter the SDK does not know; max_retries=0 for this call only.
    mark = len(journal())
    try:
        client().with_options(max_retries=0).chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            extra_body={"x_sim": {"fault": "reject", "status": 500}},
        )
        raise AssertionError("no 502")
    except openai.InternalServerError as e:
        assert e.status_code == 502, e
        assert (e.type, e.code) == ("upstream_error", "upstream_error"), e.body
        assert "HTTP 500" in e.message, e.message
        assert "Tried 3 times." in e.message, e.message
    # The gateway tried its one endpoint three times (a 500 is transient);
    # the SDK, told max_retries=0, asked once.
    assert len(journal()) == mark + 3, "retried although max_retries=0"


def step_rate_limit_retry() -> None:
    """429: the SDK's own retry waits Retry-After and succeeds."""
    no_retry = OpenAI(base_url=BASE_URL, api_key=LIMITED_KEY, max_retries=0)
    default = OpenAI(base_url=BASE_URL, api_key=LIMITED_KEY)  # max_retries=2
    msgs = [{"role": "user", "content": "ping"}]
    for attempt in range(3):
        # Drain the bucket (60 per minute, refilled one per second).
        for i in range(200):
            try:
                no_retry.chat.completions.create(model=MODEL, messages=msgs)
            except openai.RateLimitError as e:
                assert e.status_code == 429 and e.code == "rate_limit_exceeded" and e.type == "rate_limit_error"
                retry_after = e.response.headers["retry-after"]
                assert retry_after == "1", retry_after
                assert e.response.headers["x-ratelimit-remaining-requests"] == "0"
                break
        else:
            raise AssertionError("no 429 after 200 requests")
        start = time.monotonic()
        raw = default.chat.completions.with_raw_response.create(model=MODEL, messages=msgs)
        elapsed = time.monotonic() - start
        done = raw.parse()
        assert done.choices[0].message.content.startswith("You said: ping")
        if raw.retries_taken == 0:
            # The bucket refilled between the 429 and this request (a
            # millisecond race); drain it again. Without Retry-After the SDK
            # would back off 0.375 to 0.5 s, caught by the elapsed check.
            print(f"rate limit: refilled before the retried call (attempt {attempt}), again")
            continue
        assert raw.retries_taken == 1, raw.retries_taken
        assert elapsed >= 0.95, elapsed
        assert elapsed < 5, elapsed
        print(f"rate limit: 429, Retry-After {retry_after}, retried once, succeeded after {elapsed:.3f}s")
        print(f"RETRY_ELAPSED_MS={int(elapsed * 1000)}")
        return
    raise AssertionError("the bucket refilled before every retried call")


def step_spent_budget_not_retried() -> None:
    """429 insufficient_quota with x-should-retry: false: asked once."""
    sent = []
    http = openai.DefaultHttpxClient(event_hooks={"request": [sent.append]})
    default = OpenAI(base_url=BASE_URL, api_key=BROKE_KEY, http_client=http)  # max_retries=2
    start = time.monotonic()
    try:
        default.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "ping"}], max_tokens=16
        )
        raise AssertionError("a zero budget admitted a request")
    except openai.RateLimitError as e:
        assert e.status_code == 429, e.status_code
        assert e.code == "insufficient_quota" and e.type == "insufficient_quota", (e.code, e.type)
        assert e.response.headers["x-should-retry"] == "false"
        assert "budget" in e.message, e.message
    elapsed = time.monotonic() - start
    assert len(sent) == 1, f"{len(sent)} requests sent"
    print(f"spent budget: 429 insufficient_quota, one request, no retry ({elapsed:.3f}s)")


def step_cut_stream_raises() -> None:
    """--stream-error-event: a stream the provider cuts raises APIError
    instead of ending like a whole answer."""
    text = ""
    code = None
    try:
        stream = client(max_retries=0).chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Tell me a story."}],
            stream=True,
            extra_body={"x_sim": {"fault": "reset", "after": 3}},
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
        raise AssertionError("a cut stream ended like a whole answer")
    except openai.APIError as e:
        assert not isinstance(e, openai.APIStatusError), type(e)
        assert e.code == "upstream_reset", (e.code, e.body)
        assert e.type == "upstream_error", e.type
        assert "truncated" in e.message, e.message
        code = e.code
    print(f"cut stream: APIError {code!r} after {len(text)} characters of the answer")


def step_provider_refusal_not_retried() -> None:
    """502 for a provider's 400, with x-should-retry: false: asked once, and
    the provider's own code is readable."""
    sent = []
    http = openai.DefaultHttpxClient(event_hooks={"request": [sent.append]})
    default = OpenAI(base_url=BASE_URL, api_key=KEY, http_client=http)  # max_retries=2
    before = len(journal())
    try:
        default.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "ping"}],
            extra_body={"x_sim": {"fault": "reject", "status": 400, "message": "context too long"}},
        )
        raise AssertionError("a refused request succeeded")
    except openai.InternalServerError as e:
        assert e.status_code == 502, e.status_code
        assert e.code == "upstream_error", e.code
        assert e.response.headers["x-should-retry"] == "false"
        provider = e.body["provider"]
        assert provider["status"] == 400 and provider["message"] == "context too long", provider
    assert len(sent) == 1, f"{len(sent)} requests sent"
    assert len(journal()) == before + 1, "the gateway did not retry a refusal either"
    print(f"provider refusal: 502, provider code {provider['code']!r}, one request")


def report_journal() -> None:
    """What the provider received, once per shape (printed, not checked)."""
    seen = set()
    for e in journal():
        try:
            body = json.loads(e["body"])
        except (ValueError, TypeError):
            continue
        roles = [m.get("role") if isinstance(m, dict) else type(m).__name__ for m in body.get("messages", [])]
        line = f"provider received: keys={sorted(body)} roles={roles}"
        if line not in seen:
            seen.add(line)
            print(line)


STEPS = [
    step_environment_and_models,
    step_non_streamed,
    step_streamed,
    step_tool_round_trip,
    step_image,
    step_errors,
    step_rate_limit_retry,
    step_spent_budget_not_retried,
    step_cut_stream_raises,
    step_provider_refusal_not_retried,
]


def main() -> int:
    print(f"openai (python) {openai.__version__}")
    for step in STEPS:
        t = time.monotonic()
        step()
        print(f"ok {step.__name__} ({time.monotonic() - t:.2f}s)")
    report_journal()
    return 0


if __name__ == "__main__":
    sys.exit(main())
