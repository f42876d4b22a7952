"""Demo content: six approved tasks in finance, law and consulting, and a task set; idempotent.

Each task's world holds a multi-page PDF with a table, a workbook with formulas, a chat log and
e-mails, all generated in code. The numbers agree across files, and each golden answer (or solution
script) meets every deterministic criterion; tests/tasks_authoring/test_demo.py grades them.
"""

from __future__ import annotations

import io

from django.contrib.auth.models import User
from django.db import transaction

from .demo_catalogue import DemoTask, demo_tasks
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


def _create_approved(spec: DemoTask, expert: User, reviewer: User) -> Task:
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
    task_version_submit(version=version, user=expert)
    review_decide(
        version=version, reviewer=reviewer, decision="approve", comment="Clear, checkable, numbers agree."
    )
    return task


@transaction.atomic
def demo_content_ensure(*, expert: User, reviewer: User, researcher: User) -> dict[str, int]:
    """Creates the demo tasks and task set that are missing; returns how many of each were created now."""
    specs = demo_tasks()
    created_tasks = 0
    for spec in specs:
        if Task.objects.filter(slug=spec.slug).exists():
            continue
        _create_approved(spec, expert, reviewer)
        created_tasks += 1
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
