"""Who may open what in the runs pages: one helper per object kind. Outsiders get 404."""

from __future__ import annotations

from django.http import HttpRequest
from django.shortcuts import get_object_or_404

from runs import selectors
from runs.models import Rollout, Run
from webapp.roles import Role, require_role

# Everyone who may read some run: researchers their own, reviewers all, experts the runs of their tasks.
RUN_READER_ROLES = (Role.EXPERT, Role.RESEARCHER, Role.REVIEWER)


def _require_run_reader(request: HttpRequest) -> None:
    require_role(request, *RUN_READER_ROLES)


def _get_run_for_user(request: HttpRequest, pk: int) -> Run:
    _require_run_reader(request)
    return selectors.run_visible_to(user=request.user, pk=pk)


def _get_rollout_for_user(request: HttpRequest, pk: int, rollout_id: int) -> tuple[Run, Rollout]:
    run = _get_run_for_user(request, pk)
    rollout = get_object_or_404(Rollout.objects.select_related("task_version__task"), run=run, pk=rollout_id)
    return run, rollout
