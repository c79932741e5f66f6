"""The OpenAI Agents SDK against chatgate with kept responses: an agent with
a function tool, run three times, each run continuing the last by
previous_response_id (the SDK's documented way to keep a conversation on the
server), then a run with auto_previous_response_id (the tool loop inside one
run chained the same way). Reads OPENAI_BASE_URL and OPENAI_API_KEY; exits
non-zero on failure. Tracing is off: it would export to OpenAI."""
import asyncio
import os

import agents
from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

MODEL = "reasoning-model-k3"
set_tracing_disabled(True)
client = AsyncOpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"], max_retries=0)
print(f"openai-agents {agents.__version__}")


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    assert city == "Paris", city
    return "sunny 21C"


agent = Agent(
    name="Weather",
    instructions="Answer about the weather.",
    model=OpenAIResponsesModel(model=MODEL, openai_client=client),
    tools=[get_weather],
)


async def main() -> None:
    # Run 1: the model calls the tool, the SDK runs it and sends the result
    # back, chained on the response that called it.
    first = await Runner.run(agent, "Paris")
    assert first.final_output.startswith("The tool returned: sunny 21C"), first.final_output
    assert first.last_response_id and first.last_response_id.startswith("resp_"), first.last_response_id
    # Run 2 and 3: only the new question; the conversation is the gateway's.
    # (The marker tells the simulator to answer in words, not call the tool.)
    second = await Runner.run(
        agent, "And tomorrow? [[sim:tools=none]]", previous_response_id=first.last_response_id
    )
    assert second.final_output.startswith("You said: And tomorrow?"), second.final_output
    third = await Runner.run(
        agent, "Thanks [[sim:tools=none]]", previous_response_id=second.last_response_id
    )
    assert third.final_output.startswith("You said: Thanks"), third.final_output
    print("chained ok", first.last_response_id, second.last_response_id, third.last_response_id)
    # The whole conversation is kept: the last response's input items hold
    # the first question and the tool's output.
    items = [i async for i in client.responses.input_items.list(third.last_response_id, order="asc")]
    kinds = [i.type for i in items]
    assert "function_call" in kinds and "function_call_output" in kinds, kinds
    assert items[0].content[0].text == "Paris", items[0]
    print("conversation ok", len(items))
    # auto_previous_response_id: the tool loop inside one run is chained too.
    auto = await Runner.run(agent, "Paris", auto_previous_response_id=True)
    assert auto.final_output.startswith("The tool returned: sunny 21C"), auto.final_output
    print("auto ok", auto.last_response_id)


asyncio.run(main())
