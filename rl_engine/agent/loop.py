"""The agent loop: ask the policy for a turn, parse its tool calls, run them in the sandbox, repeat.

How an episode ends:
- a successful `submit_answer` call: its `answer` argument is the final answer (calls after it in
  the same turn are not run);
- a turn with text and no tool call: the text is the final answer (models without a submit tool,
  and OpenAI-style agents, end this way); an empty turn is `NO_ANSWER`;
- the model's fault, raised as AgentError: `UNPARSEABLE` (more than `max_parse_retries` consecutive
  turns whose calls could not be read, an unknown tool name included), `TURN_BUDGET` (bundle
  `max_turns` generations used, corrective retries included), `TOKEN_BUDGET` (completion tokens over
  the bundle's `max_tokens`), `DEADLINE` (the bundle's `agent_timeout_sec` passed, whether during
  generation or a tool call), `CONTEXT_OVERFLOW` (prompt + completion reached the context window);
- the platform's fault: HarnessError from the policy (INFERENCE) or the sandbox (TOOL_*) passes through;
  any other exception is typed by where it happened: in the policy INFERENCE, in a tool call
  TOOL_EXCEPTION, with its traceback as the detail.

Every tool result and corrective message ends with the budget left, and with a warning once less
than `low_context_fraction` of the context window remains. The `AgentTrace` passed in is filled as
the episode goes, so a caller keeps the partial trace whatever ends it.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import BaseModel, Field

from rl_engine.agent.parsing import ParsedCall, parse_turn, visible_text
from rl_engine.agent.policy import AssistantTurn, Policy, PolicyContext
from rl_engine.outcomes import AgentError, AgentErrorCode, HarnessCode, HarnessError

if TYPE_CHECKING:
    from rl_engine.bundle import TaskBundle
    from rl_engine.sandbox import ToolResult, ToolSpec

T = TypeVar("T")

SUBMIT_TOOL = "submit_answer"

SYSTEM_PROMPT = (
    "You are an expert analyst working in a sandbox. Your working folder holds the files of the task "
    "(documents, spreadsheets, chat logs, e-mails); read them with the tools. Write any requested files "
    "under output/. Base every claim on the files. When you are done, call submit_answer with your "
    "complete final answer."
)


class ToolExecutor(Protocol):
    """What the loop needs from a sandbox."""

    async def call_tool(self, name: str, arguments: dict) -> ToolResult: ...


@dataclass
class AgentConfig:
    max_parse_retries: int = 2
    # None: the policy's own `context_window` attribute, when it has one.
    context_window: int | None = None
    low_context_fraction: float = 0.2


class ToolCallTrace(BaseModel):
    id: str
    name: str
    arguments: dict[str, Any]
    result: str = ""
    is_error: bool = False
    duration_sec: float = 0.0
    repairs: list[str] = Field(default_factory=list)


class TurnTrace(BaseModel):
    index: int
    text: str
    tool_calls: list[ToolCallTrace] = Field(default_factory=list)
    parse_error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    generate_sec: float = 0.0


class AgentTrace(BaseModel):
    messages: list[dict[str, Any]] = Field(default_factory=list)
    turns: list[TurnTrace] = Field(default_factory=list)
    final_answer: str | None = None
    generate_sec: float = 0.0
    tools_sec: float = 0.0

    @property
    def prompt_tokens(self) -> int:
        return sum(turn.prompt_tokens for turn in self.turns)

    @property
    def completion_tokens(self) -> int:
        return sum(turn.completion_tokens for turn in self.turns)

    @property
    def repairs(self) -> list[str]:
        return [repair for turn in self.turns for call in turn.tool_calls for repair in call.repairs]


async def run_agent(
    bundle: TaskBundle,
    policy: Policy,
    tools_executor: ToolExecutor,
    tools: list[ToolSpec],
    *,
    trace: AgentTrace,
    config: AgentConfig | None = None,
    sample: int = 0,
) -> str:
    """Run one episode and return the final answer; `trace` holds everything that happened."""
    config = config or AgentConfig()
    episode = _Episode(bundle, policy, tools_executor, tools, trace, config, sample)
    return await episode.run()


class _Episode:
    def __init__(
        self,
        bundle: TaskBundle,
        policy: Policy,
        executor: ToolExecutor,
        tools: list[ToolSpec],
        trace: AgentTrace,
        config: AgentConfig,
        sample: int,
    ) -> None:
        self.bundle = bundle
        self.policy = policy
        self.executor = executor
        self.tools = tools
        self.tool_names = [tool.name for tool in tools]
        self.trace = trace
        self.config = config
        self.sample = sample
        self.deadline = time.monotonic() + bundle.agent_timeout_sec
        self.context_window = config.context_window or getattr(policy, "context_window", None)
        self.context_used = 0

    async def run(self) -> str:
        messages = self.trace.messages
        messages.append({"role": "system", "content": SYSTEM_PROMPT})
        messages.append({"role": "user", "content": f"{self.bundle.instruction}\n\n{self._budget_note()}"})
        parse_failures = 0
        while True:
            turn, record = await self._generate()
            parsed = parse_turn(turn.text, turn.tool_calls, self.tool_names)
            messages.append(_assistant_message(turn))
            if parsed.error:
                record.parse_error = parsed.error
                parse_failures += 1
                if parse_failures > self.config.max_parse_retries:
                    raise AgentError(
                        AgentErrorCode.UNPARSEABLE,
                        f"{parse_failures} consecutive turns had unusable tool calls; last: {parsed.error}",
                    )
                messages.append({"role": "user", "content": f"{parsed.error}\n\n{self._budget_note()}"})
                continue
            parse_failures = 0
            if not parsed.calls:
                answer = visible_text(turn.text)
                if not answer:
                    raise AgentError(AgentErrorCode.NO_ANSWER, "the model ended with an empty turn")
                self.trace.final_answer = answer
                return answer
            answer = await self._run_calls(parsed.calls, record)
            if answer is not None:
                self.trace.final_answer = answer
                return answer

    async def _generate(self) -> tuple[AssistantTurn, TurnTrace]:
        turns_used = len(self.trace.turns)
        if turns_used >= self.bundle.max_turns:
            raise AgentError(AgentErrorCode.TURN_BUDGET, f"no final answer after {turns_used} turns")
        context = PolicyContext(
            bundle=self.bundle,
            sandbox=self.executor,
            sample=self.sample,
            turn=turns_used,
            turns_left=self.bundle.max_turns - turns_used,
            seconds_left=self._seconds_left(),
        )
        started = time.monotonic()
        turn = await self._guarded(
            lambda: self.policy.next_turn(list(self.trace.messages), self.tools, context=context),
            HarnessCode.INFERENCE,
            f"policy {self.policy.name}",
        )
        elapsed = time.monotonic() - started
        self.trace.generate_sec += elapsed
        record = TurnTrace(
            index=turns_used,
            text=turn.text,
            prompt_tokens=turn.prompt_tokens,
            completion_tokens=turn.completion_tokens,
            token_ids=turn.token_ids,
            logprobs=turn.logprobs,
            generate_sec=elapsed,
        )
        self.trace.turns.append(record)
        if self.trace.completion_tokens > self.bundle.max_tokens:
            raise AgentError(
                AgentErrorCode.TOKEN_BUDGET,
                f"{self.trace.completion_tokens} completion tokens used, the budget is {self.bundle.max_tokens}",
            )
        self.context_used = turn.prompt_tokens + turn.completion_tokens
        if self.context_window and self.context_used >= self.context_window:
            raise AgentError(
                AgentErrorCode.CONTEXT_OVERFLOW,
                f"the conversation reached {self.context_used} tokens, the context window is {self.context_window}",
            )
        return turn, record

    async def _run_calls(self, calls: list[ParsedCall], record: TurnTrace) -> str | None:
        for call in calls:
            call_trace = ToolCallTrace(
                id=call.id, name=call.name, arguments=call.arguments, repairs=call.repairs
            )
            record.tool_calls.append(call_trace)
            started = time.monotonic()
            result = await self._guarded(
                lambda call=call: self.executor.call_tool(call.name, call.arguments),
                HarnessCode.TOOL_EXCEPTION,
                f"tool {call.name}",
            )
            call_trace.duration_sec = time.monotonic() - started
            self.trace.tools_sec += call_trace.duration_sec
            call_trace.result, call_trace.is_error = result.text, result.is_error
            self.trace.messages.append(
                {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": result.text}
            )
            if call.name == SUBMIT_TOOL and not result.is_error:
                return _submitted_answer(call.arguments)
        self.trace.messages[-1]["content"] += f"\n\n{self._budget_note()}"
        return None

    async def _guarded(self, start: Callable[[], Awaitable[T]], code: HarnessCode, where: str) -> T:
        """Await `start()` within the episode's deadline.

        An exception the policy or the sandbox did not type is the platform's fault at that place:
        HarnessError(code) with the traceback as its detail.
        """
        seconds_left = self._seconds_left()
        if seconds_left <= 0:
            raise AgentError(
                AgentErrorCode.DEADLINE, f"the {self.bundle.agent_timeout_sec:g} s time limit passed"
            )
        try:
            async with asyncio.timeout(seconds_left) as limit:
                return await start()
        except (AgentError, HarnessError):
            raise
        except Exception as error:
            if isinstance(error, TimeoutError) and limit.expired():
                raise AgentError(
                    AgentErrorCode.DEADLINE, f"the {self.bundle.agent_timeout_sec:g} s time limit passed"
                ) from None
            raise HarnessError(
                code, f"unexpected {type(error).__name__} in {where}: {error}", detail=traceback.format_exc()
            ) from error

    def _seconds_left(self) -> float:
        return self.deadline - time.monotonic()

    def _budget_note(self) -> str:
        turns_left = self.bundle.max_turns - len(self.trace.turns)
        note = f"[Budget: {turns_left} turns and {max(0, int(self._seconds_left()))} s left.]"
        if self.context_window and self.context_used:
            left = 1 - self.context_used / self.context_window
            if left < self.config.low_context_fraction:
                note += (
                    f" [Warning: only {left:.0%} of the context window is left; "
                    "finish soon and call submit_answer with what you have.]"
                )
        return note


def _assistant_message(turn: AssistantTurn) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.text}
    if turn.tool_calls:
        message["tool_calls"] = turn.tool_calls
    return message


def _submitted_answer(arguments: dict[str, Any]) -> str:
    answer = arguments.get("answer")
    if isinstance(answer, str):
        return answer
    strings = [value for value in arguments.values() if isinstance(value, str)]
    return strings[0] if strings else ""
