"""The warm zygote: servers forked per sandbox, restarted when it dies, statistics for the benchmark."""

import asyncio
import os
import signal

import pytest

from rl_engine.sandbox import SandboxConfig, SandboxPool, create_sandbox
from rl_engine.sandbox.measure import measure_sandboxes
from tests.rl_engine.sandbox_world import WorldBundle, make_world


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("pool"))


def test_each_sandbox_gets_its_own_forked_server_and_folder(world):
    pool = SandboxPool()

    async def two():
        first = create_sandbox(WorldBundle(world), SandboxConfig(isolation="none"), pool=pool)
        second = create_sandbox(WorldBundle(world), SandboxConfig(isolation="none"), pool=pool)
        await asyncio.gather(first.start(), second.start())
        await first.call_tool("write_file", {"path": "only-first.md", "content": "1"})
        listed = (await second.call_tool("list_files", {"path": "output"})).text
        pids = {first._connection.handle.pid, second._connection.handle.pid}
        await asyncio.gather(first.close(), second.close())
        return listed, pids, first.work_dir.exists()

    try:
        listed, pids, kept = asyncio.run(two())
        stats = pool.stats()
    finally:
        pool.close()
    assert "only-first.md" not in listed
    assert len(pids) == 2 and stats.zygote_pid not in pids
    assert not kept
    assert stats.sandboxes_started["prewarmed"] == 2 and stats.ready_p50_ms["prewarmed"] > 0


def test_a_dead_zygote_is_replaced_on_the_next_start(world):
    pool = SandboxPool()
    pool.start()
    os.kill(pool.stats().zygote_pid, signal.SIGKILL)

    async def start_one():
        async with create_sandbox(WorldBundle(world), SandboxConfig(isolation="none"), pool=pool) as sandbox:
            return (await sandbox.call_tool("read_text", {"path": "docs/readme.txt"})).is_error

    try:
        assert asyncio.run(start_one()) is False
        assert pool.stats().zygote_pid is not None
    finally:
        pool.close()


def test_the_measurement_reports_cold_and_prewarmed_figures(world):
    figures = measure_sandboxes(world, samples=2, cold_samples=1, calls=5)
    assert set(figures) >= {
        "ready_cold_p50_ms",
        "ready_prewarmed_p50_ms",
        "tool_round_trip_p50_ms",
        "pss_per_sandbox_mb",
    }
    assert all(value > 0 for value in figures.values())
