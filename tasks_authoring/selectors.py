"""Reads for the web layer: visible tasks (annotated, constant queries per page), review queue, diffs."""

from __future__ import annotations

import difflib
from collections import Counter
from typing import Any

from django.db.models import Count, Exists, IntegerField, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import Http404

from webapp.roles import Role, has_role, roles_of

from .models import (
    Criterion,
    Task,
    TaskSet,
    TaskSetMember,
    TaskStatus,
    TaskVersion,
    VersionState,
    WorldFile,
)
from .permissions import is_admin

SORTS = {
    "updated": "-updated_at",
    "-updated": "updated_at",
    "title": "title",
    "-title": "-title",
    "status": "status",
    "-status": "-status",
    "domain": "domain__name",
    "-domain": "-domain__name",
    "owner": "owner__username",
    "-owner": "-owner__username",
    "created": "-created_at",
    "-created": "created_at",
}


def _visible_q(user) -> Q | None:
    """None means everything; an empty role set sees nothing."""
    if not user.is_authenticated or not roles_of(user):
        return Q(pk__in=[])
    if is_admin(user):
        return None
    has_approved = Exists(TaskVersion.objects.filter(task=OuterRef("pk"), state=VersionState.APPROVED))
    visible = Q(owner=user) | Q(team__members=user) | Q(has_approved)
    if has_role(user, Role.REVIEWER):
        visible |= ~Q(status=TaskStatus.DRAFT)
    return visible


def tasks_for_user(*, user, filters: dict[str, Any] | None = None) -> QuerySet[Task]:
    """Tasks the user may see, filtered and sorted, each annotated with its latest version's number,
    id, state, file count and criteria count — one query for any page size.

    filters: domain (slug or Domain), status, owner (User, id or username), q (title and instruction
    text), team, band (a measured difficulty band, or "unmeasured"), sort (a key of SORTS)."""
    filters = {key: value for key, value in (filters or {}).items() if value not in (None, "", [])}
    tasks = Task.objects.all()
    visible = _visible_q(user)
    if visible is not None:
        tasks = tasks.filter(pk__in=Task.objects.filter(visible).values("pk"))
    if "domain" in filters:
        domain = filters["domain"]
        tasks = tasks.filter(domain__slug=getattr(domain, "slug", domain))
    if "status" in filters:
        tasks = tasks.filter(status=filters["status"])
    if "owner" in filters:
        owner = filters["owner"]
        if hasattr(owner, "pk"):
            tasks = tasks.filter(owner=owner)
        elif str(owner).isdigit():
            tasks = tasks.filter(owner_id=int(owner))
        else:
            tasks = tasks.filter(owner__username=owner)
    if "team" in filters:
        tasks = tasks.filter(team=filters["team"])
    if "band" in filters:  # the measured band (runs.TaskDifficulty); "unmeasured": none yet
        if filters["band"] == "unmeasured":
            tasks = tasks.filter(measured_difficulty__isnull=True)
        else:
            tasks = tasks.filter(measured_difficulty__band=filters["band"])
    if "q" in filters:
        text = str(filters["q"]).strip()
        instruction_match = TaskVersion.objects.filter(task=OuterRef("pk"), instruction__icontains=text)
        tasks = tasks.filter(Q(title__icontains=text) | Q(slug__icontains=text) | Exists(instruction_match))
    latest = TaskVersion.objects.filter(task=OuterRef("pk")).order_by("-number")
    files = (
        WorldFile.objects.filter(version=OuterRef("latest_version_id"))
        .order_by()
        .values("version")
        .annotate(n=Count("pk"))
        .values("n")
    )
    criteria = (
        Criterion.objects.filter(version=OuterRef("latest_version_id"))
        .order_by()
        .values("version")
        .annotate(n=Count("pk"))
        .values("n")
    )
    tasks = tasks.annotate(
        latest_version_id=Subquery(latest.values("pk")[:1]),
        latest_version_number=Subquery(latest.values("number")[:1]),
        latest_version_state=Subquery(latest.values("state")[:1]),
    ).annotate(
        file_count=Coalesce(Subquery(files, output_field=IntegerField()), 0),
        criteria_count=Coalesce(Subquery(criteria, output_field=IntegerField()), 0),
    )
    order = SORTS.get(filters.get("sort", "updated"), "-updated_at")
    return tasks.select_related("domain", "owner").order_by(order, "pk")


def tasks_for_list(*, user, filters: dict[str, Any] | None = None) -> QuerySet[Task]:
    """The task list's rows: tasks_for_user, without archived tasks unless the status filter asks for them."""
    tasks = tasks_for_user(user=user, filters=filters).select_related("measured_difficulty")
    if not (filters or {}).get("status"):
        tasks = tasks.exclude(status=TaskStatus.ARCHIVED)
    return tasks


def task_visible_to(*, user, pk: int) -> Task:
    """The task, or Http404 for anyone who may not see it."""
    task = tasks_for_user(user=user).filter(pk=pk).first()
    if task is None:
        raise Http404("No such task")
    return task


def task_version_for(*, user, task: Task, number: int | None = None) -> TaskVersion:
    """A version of a visible task (the latest when `number` is None); 404 when it does not exist."""
    versions = task.versions.select_related("task", "created_by")
    version = versions.filter(number=number).first() if number is not None else versions.first()
    if version is None:
        raise Http404("No such version")
    return version


def versions_of(*, task: Task) -> QuerySet[TaskVersion]:
    return task.versions.select_related("created_by").annotate(
        file_count=Count("world_files", distinct=True), criteria_count=Count("criteria", distinct=True)
    )


def world_files_of(*, version: TaskVersion) -> QuerySet[WorldFile]:
    return version.world_files.select_related("blob").order_by("path")


def world_tree(*, version: TaskVersion) -> dict[str, Any]:
    """The root folder: {"name", "path", "folders": [same shape, sorted], "files": [WorldFile, by path]}."""
    root: dict[str, Any] = {"name": "", "path": "", "folders": {}, "files": []}
    for world_file in world_files_of(version=version):
        node = root
        parts = world_file.path.split("/")
        for depth, part in enumerate(parts[:-1]):
            node = node["folders"].setdefault(
                part, {"name": part, "path": "/".join(parts[: depth + 1]), "folders": {}, "files": []}
            )
        node["files"].append(world_file)

    def freeze(node: dict[str, Any]) -> dict[str, Any]:
        folders = [freeze(child) for _, child in sorted(node["folders"].items())]
        return {**node, "folders": folders}

    return freeze(root)


def criteria_of(*, version: TaskVersion) -> QuerySet[Criterion]:
    return version.criteria.order_by("order")


def reviews_of(*, version: TaskVersion) -> QuerySet:
    return version.reviews.select_related("reviewer", "criterion", "world_file").order_by("created_at")


def review_queue(*, reviewer) -> QuerySet[TaskVersion]:
    """Versions waiting for review, oldest first; a reviewer's own tasks are left out (admins see all)."""
    if not has_role(reviewer, Role.REVIEWER):
        return TaskVersion.objects.none()
    queue = TaskVersion.objects.filter(state=VersionState.IN_REVIEW)
    if not is_admin(reviewer):
        queue = queue.exclude(task__owner=reviewer)
    return (
        queue.select_related("task", "task__domain", "task__owner", "created_by")
        .annotate(
            file_count=Count("world_files", distinct=True), criteria_count=Count("criteria", distinct=True)
        )
        .order_by("submitted_at", "pk")
    )


def version_diff(*, old: TaskVersion, new: TaskVersion) -> dict[str, Any]:
    """What changed between two versions: instruction lines, fields, files and rubric."""
    instruction = list(
        difflib.unified_diff(
            old.instruction.splitlines(),
            new.instruction.splitlines(),
            fromfile=f"v{old.number}",
            tofile=f"v{new.number}",
            lineterm="",
        )
    )
    fields = [
        {"field": name, "old": getattr(old, name), "new": getattr(new, name)}
        for name in ("max_turns", "max_tokens", "time_limit_sec", "tools", "golden_answer", "solution_script")
        if getattr(old, name) != getattr(new, name)
    ]
    old_files = dict(old.world_files.values_list("path", "blob_id"))
    new_files = dict(new.world_files.values_list("path", "blob_id"))
    files = {
        "added": sorted(set(new_files) - set(old_files)),
        "removed": sorted(set(old_files) - set(new_files)),
        "changed": sorted(p for p in set(old_files) & set(new_files) if old_files[p] != new_files[p]),
    }
    old_criteria = {c.key: c for c in old.criteria.all()}
    new_criteria = {c.key: c for c in new.criteria.all()}
    changed = []
    for key in sorted(set(old_criteria) & set(new_criteria)):
        before, after = old_criteria[key], new_criteria[key]
        differences = [
            name
            for name in ("text", "kind", "params", "weight", "required", "order")
            if getattr(before, name) != getattr(after, name)
        ]
        if differences:
            changed.append({"key": key, "old": before, "new": after, "fields": differences})
    rubric = {
        "added": [new_criteria[k] for k in sorted(set(new_criteria) - set(old_criteria))],
        "removed": [old_criteria[k] for k in sorted(set(old_criteria) - set(new_criteria))],
        "changed": changed,
    }
    unchanged = not (instruction or fields or any(files.values()) or any(rubric.values()))
    return {
        "instruction": instruction,
        "fields": fields,
        "files": files,
        "rubric": rubric,
        "unchanged": unchanged,
    }


def approved_versions(
    *, user=None, filters: dict[str, Any] | None = None, tasks: QuerySet[Task] | None = None
) -> QuerySet[TaskVersion]:
    """The newest approved version of each task: of `tasks` when given, else of the user's visible,
    non-archived tasks matching `filters` (a task whose new draft is open keeps its approved version)."""
    if tasks is None:
        filters = {key: value for key, value in (filters or {}).items() if key != "status"}
        tasks = tasks_for_user(user=user, filters=filters).exclude(status=TaskStatus.ARCHIVED)
    task_ids = (
        [task.pk for task in tasks] if not isinstance(tasks, QuerySet) or tasks.query.is_sliced else None
    )
    newest = TaskVersion.objects.filter(task=OuterRef("task"), state=VersionState.APPROVED).order_by(
        "-number"
    )
    versions = TaskVersion.objects.filter(
        task__in=task_ids if task_ids is not None else tasks.values("pk"), state=VersionState.APPROVED
    )
    return (
        versions.filter(pk=Subquery(newest.values("pk")[:1]))
        .select_related("task", "task__domain")
        .order_by("task__slug")
    )


def task_sets_for(*, user) -> QuerySet[TaskSet]:
    if not has_role(user, Role.RESEARCHER, Role.REVIEWER):
        return TaskSet.objects.none()
    return TaskSet.objects.select_related("owner").annotate(member_count=Count("members"))


def task_set_visible_to(*, user, pk: int) -> TaskSet:
    task_set = task_sets_for(user=user).filter(pk=pk).first()
    if task_set is None:
        raise Http404("No such task set")
    return task_set


def task_set_members(*, task_set: TaskSet) -> QuerySet[TaskSetMember]:
    return task_set.members.select_related("version", "version__task", "version__task__domain")


def task_set_counts(*, task_set: TaskSet) -> dict[str, Any]:
    """Members by split, by domain (with the split inside each domain) and by difficulty."""
    rows = list(
        task_set.members.values_list("split", "version__task__domain__name", "version__task__difficulty")
    )
    by_domain: dict[str, Counter] = {}
    for split, domain, _ in rows:
        by_domain.setdefault(domain, Counter())[split] += 1
    return {
        "total": len(rows),
        "by_split": dict(Counter(split for split, _, _ in rows)),
        "by_domain": {domain: dict(counts) for domain, counts in sorted(by_domain.items())},
        "by_difficulty": dict(Counter(difficulty or "unrated" for _, _, difficulty in rows)),
    }
