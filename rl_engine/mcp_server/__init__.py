"""The MCP tool server that runs inside a sandbox: `python -m rl_engine.mcp_server --workdir DIR --tools a,b`.

`server.build_server()` registers the enabled tools of `tool_names.ALL_TOOLS` over a `Workspace`;
the sandbox's zygote builds it in a forked child, the cold path through `__main__`.
"""
