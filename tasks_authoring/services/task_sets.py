"""Task sets: a frozen list of approved versions with a train/eval split drawn from a recorded seed."""

from __future__ import annotations

import random
import secrets
from typing import Any

from django.db import transaction

from ..errors import AuthoringError, NotAllowed
from ..models import Split, TaskSet, TaskSetMember, TaskVersion, VersionState
from ..permissions import can_build_task_sets


def split_versions(versions: list[TaskVersion], *, seed: int, eval_fraction: float) -> dict[int, str]:
    """{version id: split}; the same versions, seed and fraction always give the same split."""
    ordered = sorted(versions, key=lambda v: (v.task.slug, v.number))
    random.Random(seed).shuffle(ordered)
    eval_count = round(len(ordered) * eval_fraction)
    if len(ordered) >= 2:
        # A fraction strictly between 0 and 1 leaves both splits non-empty.
        if 0 < eval_fraction:
            eval_count = max(eval_count, 1)
        if eval_fraction < 1:
            eval_count = min(eval_count, len(ordered) - 1)
    return {v.pk: (Split.EVAL if i < eval_count else Split.TRAIN) for i, v in enumerate(ordered)}


@transaction.atomic
def task_set_create(
    *,
    owner,
    name: str,
    versions: list[TaskVersion] | None = None,
    filters: dict[str, Any] | None = None,
    seed: int | None = None,
    eval_fraction: float = 0.2,
    description: str = "",
) -> TaskSet:
    """From explicit versions, or from task-list filters (the newest approved version of each match)."""
    if not can_build_task_sets(owner):
        raise NotAllowed("only researchers (and admins) build task sets")
    name = (name or "").strip()
    if not name:
        raise AuthoringError("name: a task set needs a name")
    if TaskSet.objects.filter(name=name).exists():
        raise AuthoringError(f"name: a task set named {name!r} already exists")
    if not 0 <= float(eval_fraction) <= 1:
        raise AuthoringError(f"eval_fraction must be between 0 and 1, got {eval_fraction}")
    if versions is None:
        from ..selectors import approved_versions

        versions = list(approved_versions(user=owner, filters=filters or {}))
    versions = list(dict.fromkeys(versions))
    if not versions:
        raise AuthoringError("the task set would be empty: no approved task version matches")
    not_approved = [f"{v.task.slug} v{v.number}" for v in versions if v.state != VersionState.APPROVED]
    if not_approved:
        raise AuthoringError(
            f"only approved versions can join a task set; not approved: {', '.join(not_approved)}"
        )
    tasks = [v.task_id for v in versions]
    if len(set(tasks)) != len(tasks):
        raise AuthoringError("a task set holds one version per task")
    seed = secrets.randbelow(2**31) if seed is None else int(seed)
    task_set = TaskSet.objects.create(
        name=name,
        description=description,
        owner=owner,
        seed=seed,
        eval_fraction=float(eval_fraction),
        source_filters={k: str(v) for k, v in (filters or {}).items() if v not in (None, "")},
    )
    splits = split_versions(versions, seed=seed, eval_fraction=float(eval_fraction))
    TaskSetMember.objects.bulk_create(
        TaskSetMember(task_set=task_set, version=v, split=splits[v.pk]) for v in versions
    )
    return task_set
