"""Practicum's engine: task bundles, sandboxes, MCP tools, agent loop, graders, RL. Never imports Django."""

__version__ = "0.1.0"
