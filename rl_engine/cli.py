"""`python -m rl_engine eval|validate|train`: evaluate a policy on task bundles, validate the tasks, or train.

    eval --tasks DIR --policy P [...]        flags as below
    eval SPEC.json [--tasks DIR] [--out F]   an eval spec (RunSpec, kind "eval"): tasks.eval_dir,
                                             agent/model/inference, evaluation.samples_per_task,
                                             sandboxes_per_worker as concurrency, sandbox, judge
    validate SPEC.json [--tasks DIR] [...]   a validate spec: the oracle and the null agent on every
                                             task (tasks.eval_dir and tasks.train_dir); a sound task
                                             is passed by the oracle and failed by the null agent;
                                             then each task's checklist (rl_engine/validate.py)
    train SPEC.json [--tasks DIR] [--out F] [--events-url URL] [--resume] [--run-dir D] [--run-id ID]

With --run-dir, eval and validate write their events file there (RUN_DIR/events.jsonl) rather than
in the current folder, so a Ray job's working directory stays read-only.

A spec's `faults` (a fault drill, docs/harness.md) are planted in PRACTICUM_FAULTS for the run.

Exit codes: 0 when the run ran (harness errors are reported in the table and the events, not
raised), 1 when it could not run (an invalid spec — every problem is printed —, no tasks folder,
no loadable bundle, a policy or model that cannot be built) or its events could not be delivered,
2 for bad arguments; a train run that its health gate stopped (docs/quality.md) exits 3 when the
gate failed it and 4 when it paused it (resume with `train SPEC --run-dir D --resume`). Secrets
come from the environment, never from the command line:
OPENAI_API_KEY for `openai:URL`, JUDGE_API_KEY for the judge, PRACTICUM_EVENTS_TOKEN for `--events-url`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from rl_engine.agent import HFPolicy, NullPolicy, OpenAIPolicy, OraclePolicy, Policy, ScriptedPolicy
from rl_engine.evaluate import EvalSummary, evaluate, format_summary, load_bundles
from rl_engine.events import EventDeliveryError, EventEmitter, EventFanout, HttpSink, JsonlSink
from rl_engine.grading import JudgeConfig
from rl_engine.mcp_server.server import FAULTS_ENV
from rl_engine.rollout import RolloutConfig
from rl_engine.sandbox import SandboxConfig
from rl_engine.spec import RunSpec, SpecError, parse_run_spec
from rl_engine.trace import RolloutRecord
from rl_engine.validate import bundle_checklist, format_checklist, invalid_bundle_checklist

POLICY_HELP = "oracle | null | scripted:FILE | hf:PATH | openai:URL"


class CannotRun(Exception):
    """The run itself cannot start; the message says why."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m rl_engine")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("eval", help="evaluate a policy on a folder of task bundles")
    run.add_argument("spec", type=Path, nargs="?", help="an eval run spec (JSON); replaces --policy")
    run.add_argument("--tasks", type=Path, help="folder of task bundle folders (with a spec: tasks.eval_dir)")
    run.add_argument("--policy", help=POLICY_HELP)
    run.add_argument("--model", default="default", help="model name sent to an openai: endpoint")
    run.add_argument("--samples", type=_positive_int, default=1, help="rollouts per task")
    run.add_argument("--concurrency", type=_positive_int, default=4, help="rollouts at the same time")
    run.add_argument("--out", type=Path, help="events file, JSONL, appended (default: RUN_DIR/events.jsonl)")
    run.add_argument("--run-dir", type=Path, help="the run's output folder (default: the current folder)")
    run.add_argument("--events-url", help="also POST events to this URL (token: PRACTICUM_EVENTS_TOKEN)")
    run.add_argument("--run-id", default=None, help="run id carried by every event (default: a new UUID)")
    run.add_argument("--judge-url", help="OpenAI-compatible base URL for llm_judge criteria")
    run.add_argument("--judge-model", default="default")
    run.add_argument(
        "--max-attempts", type=_positive_int, default=3, help="attempts per rollout on harness errors"
    )
    run.add_argument("--isolation", choices=["auto", "bwrap", "none"], default="auto")
    run.add_argument("--temperature", type=float, default=0.0, help="hf: and openai: sampling temperature")

    validate = commands.add_parser(
        "validate", help="run the oracle and the null agent on every task of a spec"
    )
    validate.add_argument("spec", type=Path, help="the run spec (JSON, kind validate)")
    validate.add_argument("--tasks", type=Path, help="folder of task bundles (sets tasks.eval_dir)")
    validate.add_argument(
        "--run-dir", type=Path, help="the run's output folder (default: the current folder)"
    )
    validate.add_argument("--out", type=Path, help="events file, JSONL (default: RUN_DIR/events.jsonl)")
    validate.add_argument("--events-url", help="also POST events to this URL (token: PRACTICUM_EVENTS_TOKEN)")
    validate.add_argument(
        "--run-id", default=None, help="run id carried by every event (default: a new UUID)"
    )

    train = commands.add_parser("train", help="run a train spec: rollouts, updates, evaluation, checkpoints")
    train.add_argument("spec", type=Path, help="the run spec (JSON, kind train)")
    train.add_argument("--tasks", type=Path, help="folder of task bundles to train on (sets tasks.train_dir)")
    train.add_argument("--run-dir", type=Path, help="checkpoints go here (default: practicum-runs/RUN_ID)")
    train.add_argument("--out", type=Path, help="events file, JSONL (default: RUN_DIR/events.jsonl)")
    train.add_argument("--events-url", help="also POST events to this URL (token: PRACTICUM_EVENTS_TOKEN)")
    train.add_argument("--run-id", default=None, help="run id carried by every event (default: a new UUID)")
    train.add_argument(
        "--resume", action="store_true", help="continue the run in RUN_DIR from its latest checkpoint"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "eval" and args.spec is None and (args.tasks is None or args.policy is None):
        parser.error("eval needs a spec file, or --tasks and --policy")
    try:
        with _environment_kept(FAULTS_ENV):  # a spec's planted faults end with its run
            if args.command == "train":
                return asyncio.run(_train(args))
            if args.command == "validate":
                return asyncio.run(_validate(args))
            return asyncio.run(_eval(args))
    except SpecError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except CannotRun as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


@contextlib.contextmanager
def _environment_kept(name: str):
    before = os.environ.get(name)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def plant_faults(spec: RunSpec) -> None:
    """A fault drill: the spec's `faults` go into PRACTICUM_FAULTS, which every sandbox of the run reads
    as it starts its tool server, and which Ray's actors get from the driver (ray_runtime.FORWARDED_ENV).
    Faults already in the environment stay; on the same tool the spec's win (parse_faults keeps the last)."""
    if spec.faults:
        os.environ[FAULTS_ENV] = ",".join(filter(None, [os.environ.get(FAULTS_ENV, ""), *spec.faults]))


def read_spec(path: Path, *, kind: str, tasks_field: str, tasks: Path | None) -> RunSpec:
    """The spec in `path` (with --tasks put in `tasks_field`), or SpecError listing every problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise CannotRun(f"cannot read the spec {path}: {error.strerror}") from error
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return parse_run_spec(text)  # refused with the JSON error as its problem
    if isinstance(data, dict) and tasks is not None:
        data.setdefault("tasks", {})
        if isinstance(data["tasks"], dict):
            data["tasks"][tasks_field] = str(tasks)
    spec = parse_run_spec(data)
    if spec.kind != kind:
        raise CannotRun(f"{path} is a {spec.kind} spec; `{kind}` runs kind {kind!r}")
    return spec


async def _eval(args: argparse.Namespace) -> int:
    spec = None
    if args.spec is not None:
        spec = read_spec(args.spec, kind="eval", tasks_field="eval_dir", tasks=args.tasks)
        _apply_eval_spec(args, spec)
        plant_faults(spec)
    if not args.tasks.is_dir():
        raise CannotRun(f"the tasks folder {args.tasks} does not exist")
    bundles, invalid = load_bundles(args.tasks)
    for bad in invalid:
        print(f"invalid bundle {bad.path}: {bad.problem}", file=sys.stderr)
    if not bundles:
        raise CannotRun(f"no loadable task bundle under {args.tasks} ({len(invalid)} invalid)")
    policy = make_policy(
        args.policy, model=args.model, temperature=args.temperature, api_key=getattr(args, "api_key", None)
    )
    judge = (
        JudgeConfig(
            base_url=args.judge_url, model=args.judge_model, api_key=os.environ.get("JUDGE_API_KEY", "")
        )
        if args.judge_url
        else None
    )
    sandbox_config = SandboxConfig(isolation=args.isolation)
    if spec is not None:
        from rl_engine.runtime import judge_config

        judge, sandbox_config = judge_config(spec), spec.sandbox
    run_id = args.run_id or uuid.uuid4().hex
    out = _events_file(args)
    events = _emitters(args, run_id, out)
    cancel = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, cancel.set)
    summary = await evaluate(
        bundles,
        policy,
        emitter=events,
        samples=args.samples,
        concurrency=args.concurrency,
        sandbox_config=sandbox_config,
        judge=judge,
        rollout_config=RolloutConfig(max_attempts=args.max_attempts),
        invalid_bundles=invalid,
        cancel=cancel,
    )
    print(f"run {run_id}  policy {policy.name}  events {out}")
    print(format_summary(summary))
    return await _close(events)


def _events_file(args: argparse.Namespace) -> Path:
    if args.out is not None:
        return args.out
    return (args.run_dir or Path(".")) / "events.jsonl"


def _emitters(args: argparse.Namespace, run_id: str, out: Path) -> EventFanout:
    sinks: list[Any] = [JsonlSink(out)]
    if args.events_url:
        sinks.append(HttpSink(args.events_url, token=os.environ.get("PRACTICUM_EVENTS_TOKEN", "")))
    return EventFanout([EventEmitter(run_id, sink) for sink in sinks])


async def _close(events: EventFanout) -> int:
    try:
        await events.close()
    except EventDeliveryError as error:
        print(f"error: the run's events were not all delivered: {error}", file=sys.stderr)
        return 1
    return 0


class _OnePhase:
    """Forwards one policy's events into the validation run's stream, minus its own start and finish,
    and keeps its rollouts by task for the checklist."""

    def __init__(self, events: EventFanout) -> None:
        self.events = events
        self.rollouts: dict[str, list[RolloutRecord]] = {}

    def emit(self, type: str, payload: dict[str, Any]) -> None:
        if type not in ("run_started", "run_finished"):
            self.events.emit(type, payload)  # type: ignore[arg-type]
        if type == "rollout":
            record = RolloutRecord.model_validate(payload)
            self.rollouts.setdefault(record.summary.task_name, []).append(record)


VALIDATION_POLICIES = ("oracle", "null")


async def _validate(args: argparse.Namespace) -> int:
    """The oracle and the null agent on every task: the oracle should pass each one, the null agent none."""
    from rl_engine.runtime import judge_config

    spec = read_spec(args.spec, kind="validate", tasks_field="eval_dir", tasks=args.tasks)
    plant_faults(spec)
    folders = [Path(f) for f in dict.fromkeys([spec.tasks.eval_dir, spec.tasks.train_dir]) if f]
    bundles, invalid = [], []
    for folder in folders:
        if not folder.is_dir():
            raise CannotRun(f"the tasks folder {folder} does not exist")
        found, bad = load_bundles(folder)
        bundles += found
        invalid += bad
    for bad in invalid:
        print(f"invalid bundle {bad.path}: {bad.problem}", file=sys.stderr)
    if not bundles:
        raise CannotRun(
            f"no loadable task bundle under {', '.join(map(str, folders))} ({len(invalid)} invalid)"
        )
    run_id = args.run_id or uuid.uuid4().hex
    out = _events_file(args)
    events = _emitters(args, run_id, out)
    cancel = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, cancel.set)
    events.emit(
        "run_started",
        {
            "kind": "validate",
            "policies": list(VALIDATION_POLICIES),
            "tasks": [b.name for b in bundles],
            "samples": spec.evaluation.samples_per_task,
            "invalid_bundles": len(invalid),
        },
    )
    summaries, phases = {}, {}
    for index, name in enumerate(VALIDATION_POLICIES):
        phases[name] = _OnePhase(events)
        summaries[name] = await evaluate(
            bundles,
            make_policy(name),
            emitter=phases[name],  # type: ignore[arg-type]
            samples=spec.evaluation.samples_per_task,
            concurrency=spec.resources.sandboxes_per_worker,
            sandbox_config=spec.sandbox,
            judge=judge_config(spec),
            rollout_config=RolloutConfig(max_attempts=spec.max_attempts),
            invalid_bundles=invalid if index == 0 else [],  # reported once
            cancel=cancel,
        )
    findings = validation_findings(summaries["oracle"], summaries["null"])
    checklists = [invalid_bundle_checklist(bad.path, bad.problem) for bad in invalid]
    for bundle in bundles:
        checklists.append(
            await bundle_checklist(
                bundle,
                oracle=phases["oracle"].rollouts.get(bundle.name, []),
                null=phases["null"].rollouts.get(bundle.name, []),
                sandbox_config=spec.sandbox,
                judge=judge_config(spec),
            )
        )
    oracle = summaries["oracle"].model_dump(mode="json")
    events.emit(
        "run_finished",
        {
            **oracle,
            "kind": "validate",
            "by_policy": {name: summary.model_dump(mode="json") for name, summary in summaries.items()},
            "findings": findings,
            "checklists": [checklist.model_dump(mode="json") for checklist in checklists],
        },
    )
    print(f"run {run_id}  validate  events {out}")
    for name, summary in summaries.items():
        print(f"\n== policy {name}\n{format_summary(summary)}")
    print("\nchecklists:")
    for checklist in checklists:
        print(format_checklist(checklist))
    print(
        "\nfindings:"
        if findings
        else "\nfindings: none, every task is passed by the oracle and failed by null"
    )
    for finding in findings:
        print(f"  {finding['task']}: {finding['problem']}")
    return await _close(events)


def validation_findings(oracle: EvalSummary, null: EvalSummary) -> list[dict[str, str]]:
    """What is wrong with each task: the oracle fails it, the null agent passes it, or the harness broke."""
    findings = []

    def add(task: str, problem: str) -> None:
        findings.append({"task": task, "problem": problem})

    for task in sorted(set(oracle.per_task) | set(null.per_task)):
        by_oracle, by_null = oracle.per_task.get(task, {}), null.per_task.get(task, {})
        for policy, row in (("oracle", by_oracle), ("null", by_null)):
            if row.get("harness_errors"):
                add(task, f"{policy}: {row['harness_errors']} harness error(s)")
        if by_oracle.get("pass_at_1") is not None and by_oracle["pass_at_1"] < 1:
            add(task, f"the oracle does not pass it (Pass@1 {by_oracle['pass_at_1']:.2f})")
        if by_null.get("pass_at_1"):
            add(
                task,
                f"the null agent passes it (Pass@1 {by_null['pass_at_1']:.2f}): the rubric checks too little",
            )
    return findings


def _apply_eval_spec(args: argparse.Namespace, spec: RunSpec) -> None:
    """The spec's choices in the flags' places; --tasks, --out, --events-url and --run-id still apply."""
    from rl_engine.runtime import TrainingError, model_folder

    args.tasks = Path(spec.tasks.eval_dir or "")
    args.samples = spec.evaluation.samples_per_task
    args.concurrency = spec.resources.sandboxes_per_worker
    args.max_attempts = spec.max_attempts
    temperature = spec.evaluation.temperature
    args.temperature = temperature if temperature is not None else spec.sampling.temperature
    if spec.agent != "model":
        args.policy = spec.agent
    elif spec.inference.backend == "openai":
        args.api_key = os.environ.get(spec.inference.api_key_env, "")
        args.policy, args.model = f"openai:{spec.inference.base_url}", spec.inference.served_model_name
    elif spec.inference.backend == "hf":
        try:
            args.policy = f"hf:{model_folder(spec.model)}"
        except TrainingError as error:
            raise CannotRun(str(error)) from error
    else:
        raise CannotRun(
            f"the eval command runs the hf and openai backends; {spec.inference.backend} runs on Ray"
        )


async def _train(args: argparse.Namespace) -> int:
    from rl_engine.train import CHECKPOINTS, HealthGateTripped, TrainingError, train

    spec = read_spec(args.spec, kind="train", tasks_field="train_dir", tasks=args.tasks)
    plant_faults(spec)
    run_id = args.run_id or _previous_run_id(args) or uuid.uuid4().hex
    run_dir = args.run_dir or Path("practicum-runs") / run_id
    events_file = args.out or run_dir / "events.jsonl"
    existing = [path for path in (events_file, run_dir / CHECKPOINTS) if path.exists()]
    if existing and not args.resume:
        raise CannotRun(
            f"{existing[0]} already holds a run; pass --resume to continue it, or choose another --run-dir / --out"
        )
    extra = None
    if args.events_url:
        extra = HttpSink(args.events_url, token=os.environ.get("PRACTICUM_EVENTS_TOKEN", ""))
    progress = Progress(spec.max_steps)
    print(f"run {run_id}  folder {run_dir}  events {events_file}", flush=True)
    try:
        metrics = await train(
            spec,
            run_dir=run_dir,
            run_id=run_id,
            extra_sink=extra,
            on_step=progress.show,
            events_file=events_file,
        )
    except TrainingError as error:
        raise CannotRun(str(error)) from error
    except HealthGateTripped as stopped:
        print(f"error: {stopped}", file=sys.stderr)
        if stopped.trip.action == "pause":
            print(
                f"resume with: python -m rl_engine train {args.spec} --run-dir {run_dir} --resume",
                file=sys.stderr,
            )
        return stopped.exit_code
    except EventDeliveryError as error:
        print(f"error: the run's events were not all delivered: {error}", file=sys.stderr)
        return 1
    print(f"finished {spec.max_steps} steps; last reward {_number(metrics.get('reward_mean'))}", flush=True)
    return 0


def _previous_run_id(args: argparse.Namespace) -> str | None:
    """With --resume, the run id in the existing events file (so the events stay one run's)."""
    if not args.resume:
        return None
    candidates = [args.out] if args.out else []
    if args.run_dir:
        candidates.append(args.run_dir / "events.jsonl")
    for path in candidates:
        if path.is_file():
            first = path.read_text(encoding="utf-8").split("\n", 1)[0]
            try:
                return json.loads(first)["run_id"]
            except (json.JSONDecodeError, KeyError):
                continue
    return None


class Progress:
    """One line per step: step, valid reward, Pass@1, harness errors, the last evaluation, ETA."""

    def __init__(self, max_steps: int) -> None:
        self.max_steps = max_steps
        self.started = time.monotonic()
        self.first: tuple[int, float] | None = None

    def show(self, step: int, metrics: dict[str, Any]) -> None:
        if step == 0:
            print(f"eval before training  Pass@1 {_number(metrics.get('eval_pass_at_1'))}", flush=True)
            return
        now = time.monotonic()
        if self.first is None:  # the first step's time includes loading the model and sandboxes
            self.first, per_step = (step, now), now - self.started
        else:
            per_step = (now - self.first[1]) / (step - self.first[0])
        eta = per_step * (self.max_steps - step)
        parts = [
            f"step {step}/{self.max_steps}",
            f"reward {_number(metrics.get('reward_mean'))}",
            f"Pass@1 {_number(metrics.get('pass_at_1'))}",
            f"harness errors {_percent(metrics.get('harness_error_rate'))}",
        ]
        if "eval_pass_at_1" in metrics:
            parts.append(f"eval Pass@1 {_number(metrics['eval_pass_at_1'])}")
        parts += [f"{per_step:.1f} s/step", f"ETA {_duration(eta)}"]
        print("  ".join(parts), flush=True)


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def make_policy(
    spec: str, *, model: str = "default", temperature: float = 0.0, api_key: str | None = None
) -> Policy:
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
            value,
            model,
            api_key=api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", ""),
            temperature=temperature,
        )
    raise CannotRun(f"unknown policy {spec!r}; expected {POLICY_HELP}")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
