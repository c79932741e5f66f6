"""Three-step tool loops against a provider that requires its reasoning
back (the simulator as Kimi: `--require-reasoning-replay kimi`), through a
gateway that replays it (`--reasoning-replay tool_calls`). Run by
tests/tests/reasoning.rs.

  openai keep      the OpenAI SDK, the assistant message sent back whole
                   (`model_dump`): its `reasoning_content` goes through
  openai drop      the OpenAI SDK, streamed, the assistant message rebuilt
                   from content and tool calls (as most agents do): the
                   gateway restores the reasoning from its memory
  langchain        LangChain's ChatOpenAI with a tool, which drops
                   `reasoning_content`: restored from memory
  anthropic        the Anthropic SDK with thinking, the response's blocks
                   sent back: the signed thinking goes back as reasoning

The simulator checks each replayed reasoning is the one it produced for
those calls, so a filled or wrong one fails the loop. With
CHATGATE_EXPECT_REFUSAL=1 (a gateway that strips reasoning, the
specification's default) each loop must instead fail at its second
request with the provider's 400 (a 502 on chat completions).

Environment: CHATGATE_TEST_BASE_URL (http://HOST:PORT/v1), CHATGATE_TEST_KEY.
"""

from __future__ import annotations

import json
import os

import anthropic
import openai
from anthropic import Anthropic
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from openai import OpenAI

BASE_URL = os.environ["CHATGATE_TEST_BASE_URL"]
KEY = os.environ["CHATGATE_TEST_KEY"]
EXPECT_REFUSAL = os.environ.get("CHATGATE_EXPECT_REFUSAL") == "1"
MODEL = "reasoning-model-k3"
# Each loop its own conversation (the simulator's calls are derived from
# the text): one loop's answers are never another's memory.
PROMPT = "Run the three steps of {} [[sim:calls=3,input=step {{n}}]]"
REFUSED = "reasoning_content is missing in assistant tool call message"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run",
            "description": "Runs a command.",
            "parameters": {
                "type": "object",
                "properties": {"cmd": {"type": "string"}},
                "required": ["cmd"],
            },
        },
    }
]


def refused(e: Exception) -> bool:
    """The provider's refusal of the second turn, as the gateway tells it
    (a 502 on chat completions; a 400 `invalid_request_error` on the
    Messages API, as Anthropic's own refusals are)."""
    return getattr(e, "status_code", None) in (400, 502) and REFUSED in str(e)


def loop(name: str, step) -> None:
    """Runs `step(i)` until it says the loop answered; checks three tool
    rounds then an answer (or, expecting the refusal, that the second
    request is refused)."""
    for i in range(4):
        try:
            done = step(i)
        except (openai.APIStatusError, anthropic.APIStatusError) as e:
            if EXPECT_REFUSAL and i == 1 and refused(e):
                print(f"{name} refused ok")
                return
            raise
        assert not EXPECT_REFUSAL or i == 0, f"{name}: step {i} was not refused"
        if done:
            assert i == 3, f"{name}: answered after {i} rounds"
            print(f"{name} ok")
            return
    raise AssertionError(f"{name}: no answer after three rounds")


def openai_keep() -> None:
    client = OpenAI(base_url=BASE_URL, api_key=KEY, max_retries=0)
    messages: list = [{"role": "user", "content": PROMPT.format("openai keep")}]

    def step(i: int) -> bool:
        r = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
        choice = r.choices[0]
        msg = choice.message
        if choice.finish_reason == "stop":
            assert msg.content.startswith("The tool returned: ran step 3"), msg.content
            return True
        assert choice.finish_reason == "tool_calls", choice
        dumped = msg.model_dump(exclude_none=True)
        assert dumped.get("reasoning_content"), dumped
        messages.append(dumped)
        for tc in msg.tool_calls:
            cmd = json.loads(tc.function.arguments)["cmd"]
            assert cmd == f"step {i + 1}", cmd
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": f"ran {cmd}"})
        return False

    loop("openai keep", step)


def openai_drop() -> None:
    client = OpenAI(base_url=BASE_URL, api_key=KEY, max_retries=0)
    messages: list = [{"role": "user", "content": PROMPT.format("openai drop")}]

    def step(i: int) -> bool:
        stream = client.chat.completions.create(
            model=MODEL, messages=messages, tools=TOOLS, stream=True
        )
        text, calls, finish = "", {}, None
        for chunk in stream:
            if not chunk.choices:
                continue
            c = chunk.choices[0]
            finish = c.finish_reason or finish
            text += c.delta.content or ""
            for tc in c.delta.tool_calls or []:
                call = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                call["id"] = tc.id or call["id"]
                call["name"] = (tc.function.name if tc.function else None) or call["name"]
                call["arguments"] += (tc.function.arguments if tc.function else None) or ""
        if finish == "stop":
            assert text.startswith("The tool returned: ran step 3"), text
            return True
        assert finish == "tool_calls", finish
        # Rebuilt from what the client uses: no reasoning.
        messages.append(
            {
                "role": "assistant",
                "content": text or None,
                "tool_calls": [
                    {"id": c["id"], "type": "function",
                     "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for c in calls.values()
                ],
            }
        )
        for c in calls.values():
            cmd = json.loads(c["arguments"])["cmd"]
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": f"ran {cmd}"})
        return False

    loop("openai drop", step)


@tool
def run(cmd: str) -> str:
    """Runs a command."""
    return f"ran {cmd}"


def langchain() -> None:
    llm = ChatOpenAI(model=MODEL, base_url=BASE_URL, api_key=KEY, max_retries=0).bind_tools([run])
    messages: list = [HumanMessage(PROMPT.format("langchain"))]

    def step(i: int) -> bool:
        ai = llm.invoke(messages)
        messages.append(ai)
        if not ai.tool_calls:
            assert str(ai.content).startswith("The tool returned: ran step 3"), ai.content
            return True
        for tc in ai.tool_calls:
            messages.append(ToolMessage(run.invoke(tc["args"]), tool_call_id=tc["id"]))
        return False

    loop("langchain", step)


def anthropic_thinking() -> None:
    client = Anthropic(base_url=BASE_URL.removesuffix("/v1"), api_key=KEY, max_retries=0)
    tools = [
        {
            "name": "run",
            "description": "Runs a command.",
            "input_schema": {
                "type": "object",
                "properties": {"cmd": {"type": "string"}},
                "required": ["cmd"],
            },
        }
    ]
    messages: list = [{"role": "user", "content": PROMPT.format("anthropic")}]

    def step(i: int) -> bool:
        m = client.messages.create(
            model=MODEL,
            max_tokens=4000,
            thinking={"type": "enabled", "budget_tokens": 2048},
            tools=tools,
            messages=messages,
        )
        # The response's blocks, thinking and its signature included.
        messages.append({"role": "assistant", "content": m.content})
        if m.stop_reason == "end_turn":
            text = [b for b in m.content if b.type == "text"][0].text
            assert text.startswith("The tool returned: ran step 3"), text
            return True
        assert m.stop_reason == "tool_use", m
        assert m.content[0].type == "thinking" and m.content[0].signature, m.content
        results = [
            {"type": "tool_result", "tool_use_id": b.id, "content": f"ran {b.input['cmd']}"}
            for b in m.content
            if b.type == "tool_use"
        ]
        messages.append({"role": "user", "content": results})
        return False

    loop("anthropic", step)


openai_keep()
openai_drop()
langchain()
anthropic_thinking()
