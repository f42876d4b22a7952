"""Make a task set from a filtered rollout list: the task versions those rollouts ran, as a new set.

A task set holds one version per task, so when the filtered rollouts ran several versions of a task
the newest of them is taken (the one a follow-up run would most want). The set is built by the
authoring service, which checks the caller (researchers and admins) and that every version is
approved.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tasks_authoring.errors import AuthoringError, NotAllowed
from tasks_authoring.models import TaskSet, TaskVersion
from tasks_authoring.permissions import can_build_task_sets
from tasks_authoring.services.task_sets import task_set_create

from .trace_exports import describe_filters, filtered_rollouts, rollout_filters


def task_versions_of_rollouts(*, user, filters: dict[str, Any]) -> list[TaskVersion]:
    """The newest version per task among those the filtered rollouts ran (`filters`: a `rollout_filters`
    dict), by task slug."""
    rows = filtered_rollouts(user=user, filters=filters)
    version_ids = rows.exclude(task_version=None).order_by().values("task_version_id").distinct()
    newest: dict[int, TaskVersion] = {}
    for version in TaskVersion.objects.filter(pk__in=version_ids).select_related("task"):
        kept = newest.get(version.task_id)
        if kept is None or version.number > kept.number:
            newest[version.task_id] = version
    return sorted(newest.values(), key=lambda v: v.task.slug)


def task_set_from_rollouts(
    *, user, filters: Mapping[str, Any], name: str, eval_fraction: float = 0.2, seed: int | None = None
) -> TaskSet:
    """A new task set of the task versions behind the rollouts `user` sees with `filters` (URL parameters)."""
    if not can_build_task_sets(user):
        raise NotAllowed("only researchers (and admins) build task sets")
    cleaned = rollout_filters(filters)
    versions = task_versions_of_rollouts(user=user, filters=cleaned)
    if not versions:
        raise AuthoringError(
            "no rollout in this list ran a task version of this platform, so there is no task to add"
        )
    return task_set_create(
        owner=user,
        name=name,
        versions=versions,
        seed=seed,
        eval_fraction=eval_fraction,
        description=f"Made from the trace list ({describe_filters(cleaned)}).",
    )
