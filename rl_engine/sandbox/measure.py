"""Sandbox figures for the benchmark: ready time cold vs pre-warmed, tool round trip, memory per sandbox.

`python -m rl_engine.sandbox.measure [--world DIR] [--samples N]` prints them as JSON;
`bench/harness.py` calls `measure_sandboxes()` directly.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rl_engine.mcp_server.tools_files import read_text
from rl_engine.mcp_server.workspace import ServerSettings, Workspace
from rl_engine.sandbox import SandboxConfig, SandboxPool, create_sandbox


@dataclass
class _Bundle:
    world_dir: Path
    tools: list[str] = field(
        default_factory=lambda: ["list_files", "read_text", "run_python", "submit_answer"]
    )

    def enabled_tools(self) -> list[str]:
        return self.tools


def _p(values: list[float], q: int) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def _memory_mb(pid: int) -> tuple[float, float]:
    """Resident and proportional set size of one process, in MB (PSS splits pages shared with the zygote)."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value, *_ = line.split()
        fields[name.rstrip(":")] = int(value)
    return fields["Rss"] / 1024, fields["Pss"] / 1024


async def _measure(world: Path, samples: int, cold_samples: int, calls: int, live: int) -> dict[str, float]:
    pool = SandboxPool()
    began = time.perf_counter()
    await asyncio.to_thread(pool.start)
    zygote_sec = time.perf_counter() - began
    bundle = _Bundle(world)
    ready = {"cold": [], "prewarmed": []}
    for kind, count in (("cold", cold_samples), ("prewarmed", samples)):
        for _ in range(count):
            async with create_sandbox(
                bundle, SandboxConfig(prewarmed=kind == "prewarmed"), pool=pool
            ) as sandbox:
                ready[kind].append(sandbox.ready_sec * 1000)
    sandboxes = [create_sandbox(bundle, SandboxConfig(), pool=pool) for _ in range(live)]
    await asyncio.gather(*(sandbox.start() for sandbox in sandboxes))
    path = next(p for p in world.rglob("*") if p.is_file()).relative_to(world).as_posix()
    round_trips = []
    for _ in range(calls):
        began = time.perf_counter()
        await sandboxes[0].call_tool("read_text", {"path": path, "limit": 5})
        round_trips.append((time.perf_counter() - began) * 1000)
    workspace = Workspace()
    workspace.configure(sandboxes[0].work_dir, ServerSettings())
    in_process = []
    for _ in range(calls):
        began = time.perf_counter()
        read_text(workspace, path, limit=5)
        in_process.append((time.perf_counter() - began) * 1000)
    memory = [_memory_mb(sandbox._connection.handle.pid) for sandbox in sandboxes]
    await asyncio.gather(*(sandbox.close() for sandbox in sandboxes))
    pool.close()
    return {
        "zygote_start_s": round(zygote_sec, 3),
        "ready_cold_p50_ms": round(_p(ready["cold"], 50), 1),
        "ready_cold_p95_ms": round(_p(ready["cold"], 95), 1),
        "ready_prewarmed_p50_ms": round(_p(ready["prewarmed"], 50), 1),
        "ready_prewarmed_p95_ms": round(_p(ready["prewarmed"], 95), 1),
        "tool_round_trip_p50_ms": round(_p(round_trips, 50), 2),
        "tool_in_process_p50_ms": round(_p(in_process, 50), 3),
        "rss_per_sandbox_mb": round(statistics.mean(rss for rss, _ in memory), 1),
        "pss_per_sandbox_mb": round(statistics.mean(pss for _, pss in memory), 1),
    }


def measure_sandboxes(
    world: Path, *, samples: int = 20, cold_samples: int = 5, calls: int = 200, live: int = 8
) -> dict[str, float]:
    """Start sandboxes over `world` and return the figures (milliseconds, megabytes)."""
    return asyncio.run(_measure(world, samples, cold_samples, calls, live))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m rl_engine.sandbox.measure", description=__doc__)
    parser.add_argument("--world", type=Path, help="a world folder; a one-file world when omitted")
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--cold-samples", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        world = args.world
        if world is None:
            world = Path(scratch)
            (world / "notes.txt").write_text("".join(f"line {n}\n" for n in range(100)))
        figures = measure_sandboxes(world, samples=args.samples, cold_samples=args.cold_samples)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
