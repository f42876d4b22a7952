"""Demo content: six approved tasks in finance, law and consulting, a task set, and one broken draft; idempotent.

Each task's world holds a multi-page PDF with a table, a workbook with formulas, a chat log and
e-mails, all generated in code. The numbers agree across files, and each golden answer (or solution
script) meets every deterministic criterion; tests/tasks_authoring/test_demo.py grades them.
"""

from __future__ import annotations

import io
from dataclasses import replace

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
BOOTSTRAP_OVERRIDE = (
    "Demo content, set up by bootstrap_demo before any judge runs, so its llm_judge criteria could not be "
    "graded; every golden answer is checked against the deterministic criteria by "
    "tests/tasks_authoring/test_demo.py. The validation said: {problem}"
)


def _create_approved(spec: DemoTask, expert: User, reviewer: User, admin: User | None) -> Task:
    task = _create_draft(spec, expert)
    version = task.latest_version
    task_version_submit(version=version, user=expert)
    _validate_for_approval(version, expert, admin)
    review_decide(
        version=version, reviewer=reviewer, decision="approve", comment="Clear, checkable, numbers agree."
    )
    return task


def _validate_for_approval(version, expert: User, admin: User | None) -> None:
    """Validates in this process (no worker runs yet). The demo's llm_judge criteria need a judge, which
    starts after set-up, so a validation that fails is overridden by the demo admin, saying why
    (docs/quality.md, "Demo")."""
    from runs.services.validation import (
        validation_problem,
        version_validation_override,
        version_validation_run_inline,
    )

    validation = version_validation_run_inline(version=version, user=expert)
    problem = validation_problem(version)
    if problem is None:
        return
    if admin is None:
        raise AuthoringError(f"the demo task did not validate: {problem}")
    version_validation_override(
        validation=validation, user=admin, reason=BOOTSTRAP_OVERRIDE.format(problem=problem)
    )


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
    *, expert: User, reviewer: User, researcher: User, admin: User | None = None
) -> dict[str, int]:
    """Creates the demo tasks and task set that are missing; returns how many of each were created now.

    Each task is validated before it is approved (`admin` overrides a validation that fails for want of
    the judge); the broken draft is left for the expert to submit."""
    specs = demo_tasks()
    created_tasks = 0
    for spec in specs:
        if Task.objects.filter(slug=spec.slug).exists():
            continue
        _create_approved(spec, expert, reviewer, admin)
        created_tasks += 1
    if not Task.objects.filter(slug=BROKEN_DRAFT_SLUG).exists():
        _create_draft(broken_draft(), expert)
    created_sets = 0
    if not TaskSet.objects.filter(name=DEMO_TASK_SET).exists():
        versions = [
            task.versions.filter(state=VersionState.APPROVED).order_by("-number").first()
            for task in Task.objects.filter(slug__in=[spec.slug for spec in specs])
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
    return {"tasks": created_tasks, "task_sets": created_sets}
