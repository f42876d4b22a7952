"""Harness benchmark: sandbox ready time, tool round trip, scripted episodes per second, memory per sandbox.

Prints every figure beside its target (issue 4) in one run, and stops by itself: each section is
bounded and the whole run is cut off after `--budget-sec` (170 s by default, under 3 minutes).

    .venv/bin/python bench/harness.py [--isolation auto|bwrap|none]

- ready time: `Sandbox.start()` to a listed toolbox, cold (a fresh `python -m rl_engine.mcp_server`)
  and pre-warmed (a server forked by the pool's warm zygote);
- tool round trip: `read_text` through the MCP session, beside the same tool function called in-process;
- episodes/s: full rollouts (sandbox start, 10 scripted tool calls, submit, grading, close) at
  concurrency 1, 4, 8 and 16;
- memory: RSS and USS (pages only that process holds; forked servers share the zygote's) per live
  tool server, with 8 sandboxes open at once.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rl_engine.agent import ScriptedPolicy  # noqa: E402
from rl_engine.bundle import Criterion, Rubric, TaskBundle  # noqa: E402
from rl_engine.mcp_server.server import TOOL_FUNCTIONS  # noqa: E402
from rl_engine.mcp_server.workspace import ServerSettings, Workspace  # noqa: E402
from rl_engine.rollout import RolloutConfig, run_rollout  # noqa: E402
from rl_engine.sandbox import SandboxConfig, SandboxPool, create_sandbox  # noqa: E402

TOOLS = ["list_files", "directory_tree", "file_info", "read_text", "search_files", "submit_answer"]
EPISODE_CALLS = [
    ("list_files", {}),
    ("directory_tree", {}),
    ("file_info", {"path": "notes.txt"}),
    ("read_text", {"path": "notes.txt"}),
    ("search_files", {"query": "growth"}),
    ("read_text", {"path": "data/sales.csv"}),
    ("list_files", {"path": "data"}),
    ("file_info", {"path": "data/sales.csv"}),
    ("search_files", {"query": "target"}),
    ("read_text", {"path": "notes.txt"}),
]


def make_bundle(root: Path) -> TaskBundle:
    world = root / "world"
    (world / "data").mkdir(parents=True)
    (world / "notes.txt").write_text("APAC growth was 12.5%; the target of 15% was not met.\n" * 20)
    (world / "data" / "sales.csv").write_text(
        "year,sales\n" + "".join(f"{2000 + i},{80 + i}\n" for i in range(200))
    )
    rubric = Rubric(
        criteria=[Criterion(id="c1", text="Says 12.5%", kind="contains", params={"value": "12.5%"})]
    )
    return TaskBundle(
        name="bench/episode",
        version="1",
        instruction="Report APAC growth.",
        rubric=rubric,
        world_dir=world,
        tools=TOOLS,
        max_turns=20,
        agent_timeout_sec=120,
    )


def percentile(values: list[float], q: int) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


async def ready_times(
    bundle: TaskBundle, config: SandboxConfig, pool: SandboxPool, count: int
) -> list[float]:
    times = []
    for _ in range(count):
        sandbox = create_sandbox(bundle, config, pool=pool)
        began = time.perf_counter()
        await sandbox.start()
        await sandbox.list_tools()
        times.append(time.perf_counter() - began)
        await sandbox.close()
    return times


async def round_trips(
    bundle: TaskBundle, config: SandboxConfig, pool: SandboxPool, count: int
) -> tuple[list, list]:
    arguments = {"path": "notes.txt"}
    sandbox = create_sandbox(bundle, config, pool=pool)
    await sandbox.start()
    try:
        over_mcp = []
        for _ in range(count):
            began = time.perf_counter()
            await sandbox.call_tool("read_text", arguments)
            over_mcp.append(time.perf_counter() - began)
        workspace = Workspace()
        workspace.configure(sandbox.work_dir, ServerSettings())
        function = TOOL_FUNCTIONS["read_text"]
        in_process = []
        for _ in range(count):
            began = time.perf_counter()
            result = function(workspace, **arguments)
            if inspect.isawaitable(result):
                await result
            in_process.append(time.perf_counter() - began)
    finally:
        await sandbox.close()
    return over_mcp, in_process


async def episodes_per_second(bundle, config, pool, concurrency: int, episodes: int) -> tuple[float, dict]:
    turns = [{"tool_calls": [{"name": name, "arguments": args}]} for name, args in EPISODE_CALLS]
    policy = ScriptedPolicy([*turns, {"answer": "APAC growth was 12.5%."}], name="bench")
    gate = asyncio.Semaphore(concurrency)
    outcomes: dict[str, int] = {}

    async def one(sample: int) -> None:
        async with gate:
            records = await run_rollout(
                bundle,
                policy,
                sandbox_config=config,
                judge=None,
                config=RolloutConfig(max_attempts=1),
                sample=sample,
                pool=pool,
            )
        outcome = str(records[-1].summary.outcome)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    began = time.perf_counter()
    await asyncio.gather(*(one(sample) for sample in range(episodes)))
    return episodes / (time.perf_counter() - began), outcomes


async def memory_per_sandbox(bundle, config, pool, count: int) -> tuple[float, float]:
    sandboxes = [create_sandbox(bundle, config, pool=pool) for _ in range(count)]
    await asyncio.gather(*(sandbox.start() for sandbox in sandboxes))
    try:
        for sandbox in sandboxes:
            await sandbox.call_tool("read_text", {"path": "notes.txt"})
        # The server pid is not part of the Sandbox contract; the benchmark reads it from the connection.
        processes = [psutil.Process(sandbox._connection.handle.pid) for sandbox in sandboxes]
        rss = [process.memory_info().rss for process in processes]
        uss = [process.memory_full_info().uss for process in processes]
    finally:
        await asyncio.gather(*(sandbox.close() for sandbox in sandboxes))
    return statistics.mean(rss) / 2**20, statistics.mean(uss) / 2**20


async def run(isolation: str) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="practicum-bench-") as root:
        bundle = make_bundle(Path(root))
        pool = SandboxPool()
        began = time.perf_counter()
        await asyncio.to_thread(pool.start)
        rows.append(("zygote start (once per process)", f"{(time.perf_counter() - began) * 1000:.0f} ms", ""))
        warm = SandboxConfig(isolation=isolation, prewarmed=True)
        cold = SandboxConfig(isolation=isolation, prewarmed=False)
        try:
            cold_times = await ready_times(bundle, cold, pool, 6)
            warm_times = await ready_times(bundle, warm, pool, 30)
            rows.append(("sandbox ready p50 / p95, cold", _ms_pair(cold_times), ""))
            p50 = percentile(warm_times, 50) * 1000
            rows.append(
                (
                    "sandbox ready p50 / p95, pre-warmed",
                    _ms_pair(warm_times),
                    _verdict(p50 <= 150, "p50 <= 150 ms"),
                )
            )
            over_mcp, in_process = await round_trips(bundle, warm, pool, 300)
            p50 = percentile(over_mcp, 50) * 1000
            rows.append(
                (
                    "read_text round trip p50 / p95 (MCP)",
                    _ms_pair(over_mcp, 2),
                    _verdict(p50 <= 5, "p50 <= 5 ms"),
                )
            )
            rows.append(("read_text in-process p50 / p95", _ms_pair(in_process, 3), ""))
            for concurrency in (1, 4, 8, 16):
                rate, outcomes = await episodes_per_second(
                    bundle, warm, pool, concurrency, max(8, 2 * concurrency)
                )
                target = _verdict(rate >= 8, ">= 8 /s") if concurrency == 8 else ""
                counts = ", ".join(f"{k}={v}" for k, v in sorted(outcomes.items()))
                rows.append(
                    (f"10-call episodes/s, concurrency {concurrency:>2}", f"{rate:.1f} /s ({counts})", target)
                )
            rss, uss = await memory_per_sandbox(bundle, warm, pool, 8)
            rows.append(("RSS per live sandbox (8 open)", f"{rss:.1f} MB", ""))
            rows.append(("USS per live sandbox (8 open)", f"{uss:.1f} MB", _verdict(uss <= 80, "<= 80 MB")))
            zygote = psutil.Process(pool.stats().zygote_pid)
            rows.append(("zygote RSS (shared by forks)", f"{zygote.memory_info().rss / 2**20:.1f} MB", ""))
            isolation_used = create_sandbox(bundle, warm, pool=pool)
            await isolation_used.start()
            rows.append(("isolation", isolation_used.isolation, ""))
            await isolation_used.close()
        finally:
            pool.close()
    return rows


def _ms_pair(values: list[float], digits: int = 0) -> str:
    return f"{percentile(values, 50) * 1000:.{digits}f} / {percentile(values, 95) * 1000:.{digits}f} ms"


def _verdict(ok: bool, target: str) -> str:
    return f"{target}  {'OK' if ok else 'MISSED'}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--isolation", choices=["auto", "bwrap", "none"], default="auto")
    parser.add_argument("--budget-sec", type=float, default=170)
    args = parser.parse_args()
    began = time.perf_counter()

    async def bounded():
        async with asyncio.timeout(args.budget_sec):
            return await run(args.isolation)

    try:
        rows = asyncio.run(bounded())
    except TimeoutError:
        print(f"benchmark stopped at its {args.budget_sec:g} s budget", file=sys.stderr)
        return 1
    print(f"{'figure':<40} {'measured':<34} target")
    for figure, measured, target in rows:
        print(f"{figure:<40} {measured:<34} {target}")
    print(f"({psutil.cpu_count()} CPUs, total {time.perf_counter() - began:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
