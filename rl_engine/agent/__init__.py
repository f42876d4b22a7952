"""The agent side of a rollout: chat formatting, tool-call parsing and repair, the loop, policies."""

from rl_engine.agent.loop import AgentConfig, AgentTrace, run_agent
from rl_engine.agent.policies import HFPolicy, NullPolicy, OpenAIPolicy, OraclePolicy, ScriptedPolicy
from rl_engine.agent.policy import AssistantTurn, Policy, PolicyContext

__all__ = [
    "AgentConfig",
    "AgentTrace",
    "AssistantTurn",
    "HFPolicy",
    "NullPolicy",
    "OpenAIPolicy",
    "OraclePolicy",
    "Policy",
    "PolicyContext",
    "ScriptedPolicy",
    "run_agent",
]
