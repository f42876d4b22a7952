"""Demo content: six approved tasks in finance, law and consulting, a task set, and one broken draft; idempotent.

Each task's world holds a multi-page PDF with a table, a workbook with formulas, a chat log and
e-mails, all generated in code. The numbers agree across files, and each golden answer (or solution
script) meets every deterministic criterion; tests/tasks_authoring/test_demo.py grades them.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, replace
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from .demo_catalogue import DemoTask, demo_tasks
from .errors import AuthoringError
from .models import Task, TaskSet, VersionState
from .services import (
    criterion_create,
    review_decide,
    task_create,
    task_set_create,
    task_version_submit,
    task_version_update,
    world_file_upload,
)

DEMO_TASK_SET = "Demo: knowledge work v1"
DEMO_SEED = 20240611
BROKEN_DRAFT_SLUG = "apac-growth-draft"
# Only when no judge answered: with one, a demo task that does not validate is a defect, never overridden.
NO_JUDGE_OVERRIDE = (
    "No llm_judge endpoint answered at {url} when bootstrap_demo set up the demo, so its llm_judge criteria "
    "could not be graded (manage.py run_demo starts the local judge first and validates them for real). "
    "Every golden answer is checked against the deterministic criteria by tests/tasks_authoring/test_demo.py. "
    "The validation said: {problem}"
)


@dataclass(frozen=True)
class DemoJudge:
    """The judge the demo's validations use: its run-spec section (base_url, model, ...), and whether
    it answered when set-up began."""

    section: dict[str, Any]
    reachable: bool


def _create_approved(
    spec: DemoTask, expert: User, reviewer: User, admin: User | None, judge: DemoJudge
) -> Task:
    task = _create_draft(spec, expert)
    version = task.latest_version
    task_version_submit(version=version, user=expert)
    _validate_for_approval(version, expert, admin, judge)
    review_decide(
        version=version, reviewer=reviewer, decision="approve", comment="Clear, checkable, numbers agree."
    )
    return task


def _validate_for_approval(version, expert: User, admin: User | None, judge: DemoJudge) -> None:
    """Validates in this process (no worker runs yet) against `judge`. With a judge that answered, a
    failure is a defect of the demo and stops the set-up; without one, the llm_judge criteria cannot be
    graded, so the demo admin overrides the failure, saying exactly that (docs/quality.md, "Demo")."""
    from runs.services.validation import (
        validation_problem,
        version_validation_override,
        version_validation_run_inline,
    )

    validation = version_validation_run_inline(version=version, user=expert, judge=judge.section)
    problem = validation_problem(version)
    if problem is None:
        return
    if judge.reachable or admin is None:
        raise AuthoringError(f"the demo task {version.task.slug} did not validate: {problem}")
    reason = NO_JUDGE_OVERRIDE.format(url=judge.section["base_url"], problem=problem)
    version_validation_override(validation=validation, user=admin, reason=reason)


def _revalidate_overridden(slugs: list[str], expert: User, judge: DemoJudge) -> int:
    """Demo tasks approved by an override when no judge answered are validated again once one does, so
    a later start clears them; returns how many were validated."""
    from runs.services.validation import latest_finished_validation

    revalidated = 0
    for task in Task.objects.filter(slug__in=slugs):
        version = task.versions.filter(state=VersionState.APPROVED).order_by("-number").first()
        validation = latest_finished_validation(version) if version else None
        if validation is not None and validation.overridden_by_id is not None:
            _validate_for_approval(version, expert, None, judge)
            revalidated += 1
    return revalidated


def _create_draft(spec: DemoTask, expert: User) -> Task:
    task = task_create(
        owner=expert, title=spec.title, domain=spec.domain, difficulty=spec.difficulty, slug=spec.slug
    )
    version = task.latest_version
    task_version_update(
        version=version,
        user=expert,
        instruction=spec.instruction,
        golden_answer=spec.golden_answer,
        solution_script=spec.solution_script,
        tools=spec.tools,
    )
    for path, data in spec.files.items():
        world_file_upload(version=version, user=expert, path=path, uploaded=io.BytesIO(data))
    for text, kind, params, required in spec.criteria:
        criterion_create(version=version, user=expert, text=text, kind=kind, params=params, required=required)
    return task


def broken_draft() -> DemoTask:
    """A draft whose regex criterion its own golden answer does not meet ("not met" is not "missed"):
    submitting it in the demo shows validation catching the defect, with the reason."""
    base = demo_tasks()[0]
    criteria = [c for c in base.criteria if c[1] == "number_close"]
    criteria.append(
        ("Says the board's target was missed", "regex", {"pattern": r"target (was )?missed"}, True)
    )
    return replace(base, slug=BROKEN_DRAFT_SLUG, title=f"{base.title} (draft)", criteria=criteria)


@transaction.atomic
def demo_content_ensure(
    *, expert: User, reviewer: User, researcher: User, judge: DemoJudge, admin: User | None = None
) -> dict[str, int]:
    """Creates the demo tasks and task set that are missing; returns how many of each were created now,
    and how many overridden tasks were validated again.

    Each task is validated against `judge` before it is approved (`admin` overrides a validation that
    fails when no judge answered); the broken draft is left for the expert to submit."""
    specs = demo_tasks()
    slugs = [spec.slug for spec in specs]
    revalidated = _revalidate_overridden(slugs, expert, judge) if judge.reachable else 0
    created_tasks = 0
    for spec in specs:
        if Task.objects.filter(slug=spec.slug).exists():
            continue
        _create_approved(spec, expert, reviewer, admin, judge)
        created_tasks += 1
    if not Task.objects.filter(slug=BROKEN_DRAFT_SLUG).exists():
        _create_draft(broken_draft(), expert)
    created_sets = 0
    if not TaskSet.objects.filter(name=DEMO_TASK_SET).exists():
        versions = [
            task.versions.filter(state=VersionState.APPROVED).order_by("-number").first()
            for task in Task.objects.filter(slug__in=slugs)
        ]
        task_set_create(
            owner=researcher,
            name=DEMO_TASK_SET,
            description="The six demo tasks: finance, law and consulting.",
            versions=[v for v in versions if v is not None],
            seed=DEMO_SEED,
            eval_fraction=0.34,
        )
        created_sets = 1
    return {"tasks": created_tasks, "task_sets": created_sets, "revalidated": revalidated}
