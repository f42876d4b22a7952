"""The policy interface: given the conversation and the tool schemas, return the next assistant turn."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

if TYPE_CHECKING:
    from rl_engine.bundle import TaskBundle
    from rl_engine.sandbox import Sandbox, ToolSpec


class AssistantTurn(BaseModel):
    text: str
    # OpenAI-style `tool_calls`, when the policy's backend returns them already split out.
    tool_calls: list[dict] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None


@dataclass
class PolicyContext:
    """What a policy may know besides the messages. Only validation policies (oracle) use the sandbox."""

    bundle: TaskBundle
    sandbox: Sandbox
    sample: int
    turn: int
    turns_left: int
    seconds_left: float


class Policy(Protocol):
    name: str

    async def next_turn(
        self, messages: list[dict[str, Any]], tools: list[ToolSpec], *, context: PolicyContext
    ) -> AssistantTurn:
        """Raise HarnessError(INFERENCE) when generation itself fails."""
        ...
