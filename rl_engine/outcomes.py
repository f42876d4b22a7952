"""The one outcome every rollout ends with, and the stable codes that explain failures.

DESIGN.md "Rollout" step 5 is the contract: exactly one outcome per rollout; harness errors carry a
stable code and never produce a reward; agent errors are the model's fault and are trained on.
"""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    GRADED = "graded"
    AGENT_ERROR = "agent_error"
    HARNESS_ERROR = "harness_error"
    CANCELLED = "cancelled"


class HarnessCode(StrEnum):
    """The platform's fault. Masked from training, retried, every attempt kept."""

    BUNDLE_INVALID = "BUNDLE_INVALID"
    SANDBOX_START = "SANDBOX_START"
    TOOL_SERVER_CRASH = "TOOL_SERVER_CRASH"
    TOOL_TIMEOUT = "TOOL_TIMEOUT"
    TOOL_EXCEPTION = "TOOL_EXCEPTION"
    INFERENCE = "INFERENCE"
    JUDGE = "JUDGE"
    REWARD_INVALID = "REWARD_INVALID"


class AgentErrorCode(StrEnum):
    """The model's fault. Rewarded with the configured agent-error reward (0 by default)."""

    UNPARSEABLE = "UNPARSEABLE"
    CONTEXT_OVERFLOW = "CONTEXT_OVERFLOW"
    TURN_BUDGET = "TURN_BUDGET"
    TOKEN_BUDGET = "TOKEN_BUDGET"
    DEADLINE = "DEADLINE"
    NO_ANSWER = "NO_ANSWER"


class HarnessError(Exception):
    """Raised anywhere in the harness when the platform, not the model, failed.

    `detail` holds the traceback or the stderr of the process that failed, so the evidence
    travels with the error all the way into the stored trace.
    """

    def __init__(self, code: HarnessCode, message: str, detail: str = "") -> None:
        super().__init__(f"{code}: {message}")
        self.code = HarnessCode(code)
        self.message = message
        self.detail = detail


class AgentError(Exception):
    """Raised by the agent loop when the episode ends through the model's fault."""

    def __init__(self, code: AgentErrorCode, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = AgentErrorCode(code)
        self.message = message
