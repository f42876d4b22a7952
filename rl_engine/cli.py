"""`python -m rl_engine eval ...`: evaluate a policy on a folder of task bundles.

Exit codes: 0 when the run ran (harness errors are reported in the table and the events, not
raised), 1 when it could not run (no tasks folder, no loadable bundle, a policy that cannot be
built) or its events could not be delivered, 2 for bad arguments. Secrets come from the environment, never from the command line:
OPENAI_API_KEY for `openai:URL`, JUDGE_API_KEY for the judge, PRACTICUM_EVENTS_TOKEN for `--events-url`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import uuid
from pathlib import Path

from rl_engine.agent import HFPolicy, NullPolicy, OpenAIPolicy, OraclePolicy, Policy, ScriptedPolicy
from rl_engine.evaluate import evaluate, format_summary, load_bundles
from rl_engine.events import EventDeliveryError, EventEmitter, EventFanout, HttpSink, JsonlSink
from rl_engine.grading import JudgeConfig
from rl_engine.rollout import RolloutConfig
from rl_engine.sandbox import SandboxConfig

POLICY_HELP = "oracle | null | scripted:FILE | hf:PATH | openai:URL"


class CannotRun(Exception):
    """The run itself cannot start; the message says why."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m rl_engine")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("eval", help="evaluate a policy on a folder of task bundles")
    run.add_argument("--tasks", type=Path, required=True, help="folder of task bundle folders")
    run.add_argument("--policy", required=True, help=POLICY_HELP)
    run.add_argument("--model", default="default", help="model name sent to an openai: endpoint")
    run.add_argument("--samples", type=_positive_int, default=1, help="rollouts per task")
    run.add_argument("--concurrency", type=_positive_int, default=4, help="rollouts at the same time")
    run.add_argument("--out", type=Path, default=Path("events.jsonl"), help="events file (JSONL, appended)")
    run.add_argument("--events-url", help="also POST events to this URL (token: PRACTICUM_EVENTS_TOKEN)")
    run.add_argument("--run-id", default=None, help="run id carried by every event (default: a new UUID)")
    run.add_argument("--judge-url", help="OpenAI-compatible base URL for llm_judge criteria")
    run.add_argument("--judge-model", default="default")
    run.add_argument(
        "--max-attempts", type=_positive_int, default=3, help="attempts per rollout on harness errors"
    )
    run.add_argument("--isolation", choices=["auto", "bwrap", "none"], default="auto")
    run.add_argument("--temperature", type=float, default=0.0, help="hf: and openai: sampling temperature")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return asyncio.run(_eval(args))
    except CannotRun as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


async def _eval(args: argparse.Namespace) -> int:
    if not args.tasks.is_dir():
        raise CannotRun(f"the tasks folder {args.tasks} does not exist")
    bundles, invalid = load_bundles(args.tasks)
    for bad in invalid:
        print(f"invalid bundle {bad.path}: {bad.problem}", file=sys.stderr)
    if not bundles:
        raise CannotRun(f"no loadable task bundle under {args.tasks} ({len(invalid)} invalid)")
    policy = make_policy(args.policy, model=args.model, temperature=args.temperature)
    judge = (
        JudgeConfig(
            base_url=args.judge_url, model=args.judge_model, api_key=os.environ.get("JUDGE_API_KEY", "")
        )
        if args.judge_url
        else None
    )
    run_id = args.run_id or uuid.uuid4().hex
    sinks = [JsonlSink(args.out)]
    if args.events_url:
        sinks.append(HttpSink(args.events_url, token=os.environ.get("PRACTICUM_EVENTS_TOKEN", "")))
    events = EventFanout([EventEmitter(run_id, sink) for sink in sinks])
    cancel = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, cancel.set)
    summary = await evaluate(
        bundles,
        policy,
        emitter=events,
        samples=args.samples,
        concurrency=args.concurrency,
        sandbox_config=SandboxConfig(isolation=args.isolation),
        judge=judge,
        rollout_config=RolloutConfig(max_attempts=args.max_attempts),
        invalid_bundles=invalid,
        cancel=cancel,
    )
    print(f"run {run_id}  policy {policy.name}  events {args.out}")
    print(format_summary(summary))
    try:
        await events.close()
    except EventDeliveryError as error:
        print(f"error: the run's events were not all delivered: {error}", file=sys.stderr)
        return 1
    return 0


def make_policy(spec: str, *, model: str = "default", temperature: float = 0.0) -> Policy:
    kind, _, value = spec.partition(":")
    if kind == "oracle" and not value:
        return OraclePolicy()
    if kind == "null" and not value:
        return NullPolicy()
    if kind == "scripted" and value:
        try:
            return ScriptedPolicy.from_file(Path(value))
        except ValueError as error:
            raise CannotRun(str(error)) from error
    if kind == "hf" and value:
        if not Path(value).is_dir():
            raise CannotRun(f"hf: {value} is not a model folder")
        try:
            return HFPolicy(Path(value), temperature=temperature)
        except (OSError, ValueError) as error:
            raise CannotRun(f"hf: cannot load the model in {value}: {error}") from error
    if kind == "openai" and value:
        return OpenAIPolicy(
            value, model, api_key=os.environ.get("OPENAI_API_KEY", ""), temperature=temperature
        )
    raise CannotRun(f"unknown policy {spec!r}; expected {POLICY_HELP}")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
