"""Tasks and their versions: create, edit a draft, submit (freeze and hash), review, open a new draft."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from rl_engine.bundle import content_hash
from rl_engine.grading.checks import param_problems
from rl_engine.tool_names import ALL_TOOLS, unknown_tools

from ..errors import AuthoringError, NotAllowed, ReadOnlyVersion, SubmitError
from ..models import (
    Criterion,
    Difficulty,
    Domain,
    Review,
    ReviewDecision,
    Task,
    TaskStatus,
    TaskVersion,
    Team,
    VersionState,
    WorldFile,
)
from ..permissions import can_archive_task, can_author, can_review, is_admin, is_task_editor

VERSION_FIELDS = (
    "instruction",
    "max_turns",
    "max_tokens",
    "time_limit_sec",
    "tools",
    "golden_answer",
    "solution_script",
)
TASK_FIELDS = ("title", "domain", "difficulty", "team")
_POSITIVE_FIELDS = {"max_turns": 1_000, "max_tokens": 10_000_000, "time_limit_sec": 7 * 24 * 3600}


def require_editable(version: TaskVersion, user) -> None:
    """Approved versions are read-only for everyone, admins included; drafts only for their editors."""
    if not version.is_editable:
        raise ReadOnlyVersion(
            f"{version.task.slug} v{version.number} is {version.get_state_display().lower()} and read-only; "
            "open a new draft version to change it"
        )
    if not is_task_editor(user, version.task):
        raise NotAllowed("only the task's owner, members of its team and admins may edit this draft")


def _domain(value: Domain | str) -> Domain:
    if isinstance(value, Domain):
        return value
    domain = Domain.objects.filter(slug=value).first()
    if domain is None:
        known = ", ".join(Domain.objects.values_list("slug", flat=True))
        raise AuthoringError(f"unknown domain {value!r}; known domains: {known}")
    return domain


def unique_slug(base: str) -> str:
    slug = slugify(base)[:100].strip("-_") or "task"
    candidate, number = slug, 2
    while Task.objects.filter(slug=candidate).exists():
        candidate = f"{slug}-{number}"
        number += 1
    return candidate


def _clean_tools(tools: Any) -> list[str] | None:
    if tools is None:
        return None
    if not isinstance(tools, list | tuple) or not all(isinstance(name, str) for name in tools):
        raise AuthoringError("tools must be a list of tool names, or empty for all tools")
    unknown = unknown_tools(list(tools))
    if unknown:
        raise AuthoringError(
            f"unknown tool name(s) {', '.join(unknown)}; known tools: {', '.join(ALL_TOOLS)}"
        )
    return list(dict.fromkeys(tools))


def _clean_version_field(name: str, value: Any) -> Any:
    if name in _POSITIVE_FIELDS:
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise AuthoringError(f"{name} must be a whole number, got {value!r}") from None
        if not 1 <= number <= _POSITIVE_FIELDS[name]:
            raise AuthoringError(f"{name} must be between 1 and {_POSITIVE_FIELDS[name]:,}, got {number}")
        return number
    if name == "tools":
        return _clean_tools(value)
    if not isinstance(value, str):
        raise AuthoringError(f"{name} must be text")
    return value


@transaction.atomic
def task_create(
    *,
    owner,
    title: str,
    domain: Domain | str,
    instruction: str = "",
    difficulty: str = "",
    team: Team | None = None,
    slug: str = "",
) -> Task:
    """A new task with version 1 as an empty draft."""
    if not can_author(owner):
        raise NotAllowed("only experts (and admins) create tasks")
    title = (title or "").strip()
    if not title:
        raise AuthoringError("title: a task needs a title")
    if difficulty and difficulty not in Difficulty.values:
        raise AuthoringError(f"difficulty must be one of {', '.join(Difficulty.values)}")
    task = Task.objects.create(
        slug=unique_slug(slug or title),
        title=title[:200],
        domain=_domain(domain),
        difficulty=difficulty,
        owner=owner,
        team=team,
    )
    TaskVersion.objects.create(task=task, number=1, instruction=instruction, created_by=owner)
    return task


@transaction.atomic
def task_version_update(*, version: TaskVersion, user, **fields: Any) -> TaskVersion:
    """Edits a draft: version fields (instruction, budgets, tools, golden answer, solution) and task fields."""
    require_editable(version, user)
    unknown = sorted(set(fields) - set(VERSION_FIELDS) - set(TASK_FIELDS))
    if unknown:
        raise AuthoringError(f"cannot update {', '.join(unknown)}")
    task = version.task
    for name, value in fields.items():
        if name in VERSION_FIELDS:
            setattr(version, name, _clean_version_field(name, value))
        elif name == "title":
            if not str(value).strip():
                raise AuthoringError("title: a task needs a title")
            task.title = str(value).strip()[:200]
        elif name == "domain":
            task.domain = _domain(value)
        elif name == "difficulty":
            if value and value not in Difficulty.values:
                raise AuthoringError(f"difficulty must be one of {', '.join(Difficulty.values)}")
            task.difficulty = value or ""
        elif name == "team":
            task.team = value
    version.save()
    task.save()
    return version


def version_rubric(version: TaskVersion) -> list[dict[str, Any]]:
    return [
        {
            "id": criterion.key,
            "text": criterion.text,
            "kind": criterion.kind,
            "params": criterion.params,
            "weight": criterion.weight,
            "required": criterion.required,
        }
        for criterion in version.criteria.order_by("order")
    ]


def version_content_hash(version: TaskVersion) -> str:
    """rl_engine's content hash of what decides a rollout; equal to the exported bundle's hash."""
    return content_hash(
        instruction=version.instruction,
        max_turns=version.max_turns,
        max_tokens=version.max_tokens,
        agent_timeout_sec=float(version.time_limit_sec),
        tools=version.tools,
        rubric=version_rubric(version),
        golden_answer=version.golden_answer or None,
        solve_py=version.solution_script or None,
        world=list(version.world_files.values_list("path", "blob_id")),
    )


def submit_problems(version: TaskVersion) -> list[str]:
    problems = []
    if not version.instruction.strip():
        problems.append("the instruction is empty")
    criteria = list(version.criteria.order_by("order"))
    if not criteria:
        problems.append("the rubric has no criteria")
    for criterion in criteria:
        for problem in param_problems(criterion.kind, criterion.params):
            problems.append(f"criterion {criterion.key}: {problem}")
    if criteria and not any(c.required for c in criteria):
        problems.append("no criterion is required; mark at least the primary one as required")
    return problems


@transaction.atomic
def task_version_submit(*, version: TaskVersion, user) -> TaskVersion:
    """Freezes a draft for review, records its content hash and requests its validation (on commit)."""
    require_editable(version, user)
    problems = submit_problems(version)
    if problems:
        raise SubmitError(problems)
    version.content_hash = version_content_hash(version)
    version.state = VersionState.IN_REVIEW
    version.submitted_at = timezone.now()
    version.save(update_fields=["content_hash", "state", "submitted_at"])
    _mirror_status(version)
    # runs builds on this app, so its service is looked up here; the run is dispatched on commit.
    from runs.services.validation import version_validation_request

    version_validation_request(version=version, user=user, trigger="submit")
    return version


def _mirror_status(version: TaskVersion) -> None:
    task = version.task
    latest = task.versions.order_by("-number").first()
    if latest is not None and latest.pk == version.pk:
        task.status = version.state
        task.save(update_fields=["status", "updated_at"])


@transaction.atomic
def review_decide(
    *,
    version: TaskVersion,
    reviewer,
    decision: str,
    comment: str = "",
    criterion: Criterion | None = None,
    world_file: WorldFile | None = None,
) -> Review:
    """Approve, request changes (the comment says what) or comment; decisions need a version in review.
    Approving also needs the version's latest finished validation passed or overridden (docs/quality.md)."""
    if decision not in ReviewDecision.values:
        raise AuthoringError(f"decision must be one of {', '.join(ReviewDecision.values)}")
    if criterion is not None and criterion.version_id != version.pk:
        raise AuthoringError("the criterion belongs to another version")
    if world_file is not None and world_file.version_id != version.pk:
        raise AuthoringError("the file belongs to another version")
    if decision == ReviewDecision.COMMENT:
        if not (can_review(reviewer) or is_task_editor(reviewer, version.task)):
            raise NotAllowed("only reviewers and the task's editors may comment")
        if not comment.strip():
            raise AuthoringError("comment: a comment needs text")
    else:
        if not can_review(reviewer):
            raise NotAllowed("only reviewers may approve or request changes")
        if version.task.owner_id == reviewer.pk and not is_admin(reviewer):
            raise NotAllowed("you cannot review your own task; ask another reviewer")
        if version.state != VersionState.IN_REVIEW:
            raise AuthoringError(
                f"{version.task.slug} v{version.number} is {version.get_state_display().lower()}, "
                "not in review"
            )
        if decision == ReviewDecision.REQUEST_CHANGES and not comment.strip():
            raise AuthoringError("comment: say what needs to change")
        if decision == ReviewDecision.APPROVE:
            from runs.services.validation import version_approval_problem

            problem = version_approval_problem(version)
            if problem is not None:
                raise AuthoringError(problem)
        version.state = (
            VersionState.APPROVED if decision == ReviewDecision.APPROVE else VersionState.CHANGES_REQUESTED
        )
        version.decided_at = timezone.now()
        version.save(update_fields=["state", "decided_at"])
        _mirror_status(version)
    return Review.objects.create(
        version=version,
        reviewer=reviewer,
        decision=decision,
        comment=comment.strip(),
        criterion=criterion,
        world_file=world_file,
    )


@transaction.atomic
def task_version_new_draft(*, task: Task, user) -> TaskVersion:
    """Copies the latest version (files, rubric, fields) into a new draft; the old one stays as it was."""
    if not is_task_editor(user, task):
        raise NotAllowed("only the task's owner, members of its team and admins may open a new draft")
    latest = task.versions.select_for_update().order_by("-number").first()
    if latest.state in (VersionState.DRAFT, VersionState.IN_REVIEW):
        raise AuthoringError(
            f"v{latest.number} is still {latest.get_state_display().lower()}; "
            + ("edit it instead" if latest.state == VersionState.DRAFT else "wait for its review")
        )
    draft = TaskVersion.objects.create(
        task=task,
        number=latest.number + 1,
        created_by=user,
        **{name: getattr(latest, name) for name in VERSION_FIELDS},
    )
    WorldFile.objects.bulk_create(
        WorldFile(
            version=draft,
            path=f.path,
            blob_id=f.blob_id,
            kind=f.kind,
            extraction_status=f.extraction_status,
            extraction_error=f.extraction_error,
            preview=f.preview,
        )
        for f in latest.world_files.all()
    )
    Criterion.objects.bulk_create(
        Criterion(
            version=draft,
            order=c.order,
            key=c.key,
            text=c.text,
            kind=c.kind,
            params=c.params,
            weight=c.weight,
            required=c.required,
        )
        for c in latest.criteria.all()
    )
    _mirror_status(draft)
    return draft


@transaction.atomic
def task_archive(*, task: Task, user) -> Task:
    """Hides a task from the task list and new task sets; its versions stay intact, so task sets that
    pin them and past runs can still be reproduced."""
    if task.status != TaskStatus.APPROVED:
        raise AuthoringError(
            f"only approved tasks are archived; {task.slug} is {task.get_status_display().lower()}"
        )
    if not can_archive_task(user, task):
        raise NotAllowed("only the task's owner and admins may archive it")
    task.status = TaskStatus.ARCHIVED
    task.save(update_fields=["status", "updated_at"])
    return task
