"""Who may see and change what: one helper per object kind, written once. Outsiders get 404."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest
from django.shortcuts import get_object_or_404

from tasks_authoring import permissions, selectors
from tasks_authoring.models import Criterion, ExportJob, Task, TaskSet, TaskVersion, WorldFile
from webapp.roles import Role, has_role, require_role

AUTHORING_ROLES = (Role.EXPERT, Role.RESEARCHER, Role.REVIEWER)
# Researchers build task sets; reviewers may read them (selectors.task_sets_for decides the same).
TASK_SET_ROLES = (Role.RESEARCHER, Role.REVIEWER)


def _require_authoring_role(request: HttpRequest) -> None:
    require_role(request, *AUTHORING_ROLES)


def _get_task_for_user(request: HttpRequest, pk: int) -> Task:
    _require_authoring_role(request)
    return selectors.task_visible_to(user=request.user, pk=pk)


def _get_version(task: Task, number: int | None) -> TaskVersion:
    if number is None:
        version = task.latest_version
        if version is None:
            raise Http404("This task has no version")
        return version
    return get_object_or_404(TaskVersion, task=task, number=number)


def _can_edit(request: HttpRequest, task: Task) -> bool:
    return permissions.is_task_editor(request.user, task) and has_role(request.user, Role.EXPERT)


def _get_editable_version(request: HttpRequest, pk: int) -> TaskVersion:
    """The task's draft, for someone allowed to change it. Seeing but not owning is 403, not 404."""
    task = _get_task_for_user(request, pk)
    if not _can_edit(request, task):
        raise PermissionDenied("Only the task's author and their team can change it")
    version = _get_version(task, None)
    if not version.is_editable:
        raise PermissionDenied(
            f"Version {version.number} is {version.get_state_display().lower()} and read-only"
        )
    return version


def _get_world_file_for_user(request: HttpRequest, pk: int, file_id: int) -> WorldFile:
    task = _get_task_for_user(request, pk)
    return get_object_or_404(
        WorldFile.objects.select_related("blob", "version"), pk=file_id, version__task=task
    )


def _get_criterion_for_editor(request: HttpRequest, pk: int, criterion_id: int) -> Criterion:
    version = _get_editable_version(request, pk)
    return get_object_or_404(Criterion, pk=criterion_id, version=version)


def _get_task_set_for_user(request: HttpRequest, pk: int) -> TaskSet:
    require_role(request, *TASK_SET_ROLES)
    return selectors.task_set_visible_to(user=request.user, pk=pk)


def _get_export_job_for_user(request: HttpRequest, pk: int) -> ExportJob:
    """An export belongs to whoever asked for it; admins may open any. Everyone else gets 404."""
    jobs = ExportJob.objects.select_related("version__task", "task_set")
    if not permissions.is_admin(request.user):
        jobs = jobs.filter(owner=request.user)
    return get_object_or_404(jobs, pk=pk)


def _can_archive(request: HttpRequest, task: Task) -> bool:
    return permissions.can_archive_task(request.user, task)


def _can_review(request: HttpRequest) -> bool:
    return permissions.can_review(request.user)
