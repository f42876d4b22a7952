"""Who may read, launch and cancel runs: one place, used by services (to refuse) and selectors (to filter).

Researchers launch runs and read and cancel their own; reviewers read every run; experts read the
runs that used one of their tasks (owned or shared with their team); admins do anything; everyone
else sees nothing (views answer 404). docs/decisions.md records why researchers do not read each
other's runs by default.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Exists, OuterRef, Q

from webapp.roles import Role, has_role, roles_of

from .models import Run, RunTaskVersion

User = AbstractBaseUser | AnonymousUser


def is_admin(user: User) -> bool:
    return Role.ADMIN in roles_of(user)


def can_launch_runs(user: User) -> bool:
    return has_role(user, Role.RESEARCHER)


def can_cancel_run(user: User, run: Run) -> bool:
    if not user.is_authenticated:
        return False
    return is_admin(user) or (has_role(user, Role.RESEARCHER) and run.launched_by_id == user.pk)


def visible_runs_q(user: User) -> Q | None:
    """The runs `user` may read as a filter; None means all of them."""
    if not user.is_authenticated or not roles_of(user):
        return Q(pk__in=[])
    if has_role(user, Role.REVIEWER):  # admins hold every role
        return None
    visible = Q(pk__in=[])
    if has_role(user, Role.RESEARCHER):
        visible |= Q(launched_by=user)
    if has_role(user, Role.EXPERT):
        own_task = Q(version__task__owner=user) | Q(version__task__team__members=user)
        visible |= Q(Exists(RunTaskVersion.objects.filter(own_task, run=OuterRef("pk"))))
    return visible


def can_read_run(user: User, run: Run) -> bool:
    visible = visible_runs_q(user)
    return visible is None or Run.objects.filter(visible, pk=run.pk).exists()
