"""Demo runs: the toy task set, the toy model, and the three runs a newcomer finds on first start.

The toy tasks (rl_engine.toy_tasks, "green": six objects whose colour word is "green") go through
the product's own path: imported as a bundle folder by the demo expert, approved by the demo
reviewer, gathered in a task set by the demo researcher. On the first start run_demo launches,
through run_launch like the browser does, an evaluation of the knowledge-work demo set with the
oracle agent (its llm_judge criteria graded by the local judge server), a short training run of
the toy model on the toy set, so the dashboards have data within minutes, and a fault drill: the
oracle on a small set where a planted harness fault breaks half the tasks (docs/harness.md, "Fault
drills"). All are idempotent.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction

from rl_engine.toy_tasks import build_toy_model, write_toy_tasks
from tasks_authoring.bundles import bundle_import
from tasks_authoring.demo import DEMO_TASK_SET
from tasks_authoring.models import Domain, Split, TaskSet, VersionState
from tasks_authoring.services import review_decide, task_set_create

from .models import Run
from .services.launch import run_launch
from .services.validation import (
    validation_problem,
    version_validation_override,
    version_validation_run_inline,
)

TOY_TASK_SET = "Toy: green colours"
TOY_SEED = 7
DEMO_EVAL_RUN = "Demo: oracle on the knowledge-work tasks"
DEMO_TRAIN_RUN = "Demo: GRPO on the toy colours"
JUDGE_MODEL = "smollm2-135m-instruct"
DRILL_TASK_SET = "Demo: harness drill"
DRILL_EVAL_RUN = "Demo: harness drill (read_pdf hidden from the tool server)"
# The oracle calls no reading tool (it submits the golden answer), so a fault that needs a call would
# never fire; a hidden tool fails every task that enables it when its sandbox starts (SANDBOX_START).
DRILL_FAULTS = ["hide:read_pdf"]


class DemoRefused(Exception):
    """The demo content could not be created; the message says what was refused."""


def toy_task_set_ensure(
    *,
    expert: User,
    reviewer: User,
    researcher: User,
    name: str = TOY_TASK_SET,
    toy_set: str = "green",
    objects: list[str] | None = None,
    eval_fraction: float = 0.34,
) -> TaskSet:
    """The task set of approved toy tasks named `name`, created (import, approve, gather) when missing."""
    existing = TaskSet.objects.filter(name=name).first()
    if existing is not None:
        return existing
    Domain.objects.get_or_create(slug="toy", defaults={"name": "Toy"})
    with tempfile.TemporaryDirectory(prefix="practicum-toy-") as folder:
        write_toy_tasks(Path(folder), toy_set, objects)
        return bundles_task_set_create(
            folder=Path(folder),
            name=name,
            description=f"Toy tasks ({toy_set}): name an object's colour in one word. For trying training.",
            expert=expert,
            reviewer=reviewer,
            researcher=researcher,
            eval_fraction=eval_fraction,
        )


def bundles_task_set_create(
    *,
    folder: Path,
    name: str,
    expert: User,
    reviewer: User,
    researcher: User,
    eval_fraction: float,
    description: str = "",
    admin: User | None = None,
    override_reason: str = "",
) -> TaskSet:
    """A task set of the bundles in `folder`, imported by `expert`, validated (in this process) and
    approved by `reviewer`. A bundle that fails its validation is refused, unless `admin` overrides it
    with `override_reason` (tests that need a deliberately broken task)."""
    report = bundle_import(user=expert, zip_path=folder)
    if report.refused:
        raise DemoRefused("; ".join(f"{line.name}: {line.reason}" for line in report.refused))
    versions = []
    with transaction.atomic():
        for line in report.lines:
            version = line.version
            if version.state == VersionState.IN_REVIEW:
                _validated(version, expert, admin, override_reason)
                review_decide(version=version, reviewer=reviewer, decision="approve", comment="Imported.")
                version.refresh_from_db()
            versions.append(version)
        return task_set_create(
            owner=researcher,
            name=name,
            description=description,
            versions=versions,
            seed=TOY_SEED,
            eval_fraction=eval_fraction,
        )


def _validated(version, expert: User, admin: User | None, override_reason: str) -> None:
    validation = version_validation_run_inline(version=version, user=expert)
    problem = validation_problem(version)
    if problem is None:
        return
    if admin is None or not override_reason:
        raise DemoRefused(problem)
    version_validation_override(validation=validation, user=admin, reason=override_reason)


def toy_model_ensure(*, hidden_size: int = 64) -> Path:
    """The toy word-level model under VAR_DIR/models, built on first use (a few seconds)."""
    folder = Path(settings.VAR_DIR) / "models" / f"toy-colours-h{hidden_size}"
    if not (folder / "config.json").is_file():
        build_toy_model(folder, hidden_size=hidden_size)
    return folder


def judge_section(base_url: str | None = None) -> dict[str, Any]:
    """The run spec's judge: the local judge server that run_demo starts (default PRACTICUM_JUDGE_URL)."""
    url = base_url or settings.PRACTICUM_JUDGE_URL
    return {"base_url": url, "model": JUDGE_MODEL, "timeout_sec": 120, "retries": 2}


def toy_train_spec(model: Path, *, steps: int = 12) -> dict[str, Any]:
    """GRPO on the toy set: one-token answers, so the reward rises from chance in a few steps (docs/harness.md)."""
    return {
        "model": {"path": str(model)},
        "sampling": {"temperature": 1.0, "max_new_tokens_per_turn": 1},
        "batch": {"prompts_per_step": 4, "samples_per_prompt": 8, "micro_batch_size": 32},
        "optimizer": {"lr": 5e-3, "weight_decay": 0.0, "grad_clip": 1.0},
        "algorithm": {
            "advantage_estimator": "grpo",
            "policy_loss": "ppo_clip",
            "loss_reduction": "prompt_mean",
        },
        "evaluation": {"every_steps": 4, "samples_per_task": 4, "pass_at_k": [1, 4]},
        "checkpoint": {"every_steps": 6, "keep_last": 2},
        "resources": {"sandboxes_per_worker": 8},
        "max_steps": steps,
        "seed": 1,
        # The gate's eval half is off: on first start no evaluation of the toy set has finished yet
        # (its versions' validations, the other half, pass). docs/quality.md, "Demo".
        "health_gate": {"max_eval_harness_error_rate": None},
    }


def drill_task_set_ensure(*, researcher: User) -> TaskSet | None:
    """The fault drill's task set, made when missing from the eval splits of the knowledge-work set
    (those tasks enable every tool, read_pdf included) and of the toy set (read_text and submit_answer
    only); None while either set is missing."""
    existing = TaskSet.objects.filter(name=DRILL_TASK_SET).first()
    if existing is not None:
        return existing
    sources = TaskSet.objects.filter(name__in=[DEMO_TASK_SET, TOY_TASK_SET])
    if len(sources) < 2:
        return None
    versions = [
        member.version
        for source in sorted(sources, key=lambda task_set: task_set.name)
        for member in source.members.filter(split=Split.EVAL).select_related("version__task").order_by("pk")
    ]
    return task_set_create(
        owner=researcher,
        name=DRILL_TASK_SET,
        description="Fault drill: knowledge-work tasks, which enable read_pdf, and toy tasks, which do "
        f"not. The run {DRILL_EVAL_RUN!r} hides read_pdf from the tool server, so the knowledge-work "
        "tasks end in harness errors (SANDBOX_START) and the toy tasks pass.",
        versions=versions,
        seed=TOY_SEED,
        eval_fraction=0.5,
    )


def drill_eval_spec(judge_url: str | None = None) -> dict[str, Any]:
    """The oracle with a planted fault: the demo's harness drill (docs/harness.md, "Fault drills")."""
    return {
        "agent": "oracle",
        "judge": judge_section(judge_url),
        "resources": {"sandboxes_per_worker": 2},
        "faults": list(DRILL_FAULTS),
    }


def demo_runs_ensure(*, researcher: User, judge_url: str | None = None) -> list[Run]:
    """Launches the demo's evaluation, training and fault-drill runs unless they were launched before;
    returns the new ones."""
    launched = []
    demo_runs = [DEMO_EVAL_RUN, DEMO_TRAIN_RUN, DRILL_EVAL_RUN]
    names = set(Run.objects.filter(name__in=demo_runs).values_list("name", flat=True))
    knowledge = TaskSet.objects.filter(name=DEMO_TASK_SET).first()
    if DEMO_EVAL_RUN not in names and knowledge is not None:
        spec = {
            "agent": "oracle",
            "judge": judge_section(judge_url),
            "resources": {"sandboxes_per_worker": 2},
        }
        launched.append(
            run_launch(
                user=researcher, kind="eval", task_set=knowledge, split="all", spec=spec, name=DEMO_EVAL_RUN
            )
        )
    toy = TaskSet.objects.filter(name=TOY_TASK_SET).first()
    if DEMO_TRAIN_RUN not in names and toy is not None:
        spec = toy_train_spec(toy_model_ensure())
        launched.append(
            run_launch(
                user=researcher, kind="train", task_set=toy, split="train", spec=spec, name=DEMO_TRAIN_RUN
            )
        )
    drill = drill_task_set_ensure(researcher=researcher) if DRILL_EVAL_RUN not in names else None
    if drill is not None:
        launched.append(
            run_launch(
                user=researcher,
                kind="eval",
                task_set=drill,
                split="all",
                spec=drill_eval_spec(judge_url),
                name=DRILL_EVAL_RUN,
            )
        )
    return launched
