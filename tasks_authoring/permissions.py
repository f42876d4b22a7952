"""Who may do what with a task: one place, used by services (to refuse) and selectors (to filter)."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from webapp.roles import Role, has_role, roles_of

from .models import Task, TaskStatus, TaskVersion

User = AbstractBaseUser | AnonymousUser


def is_admin(user: User) -> bool:
    return Role.ADMIN in roles_of(user)


def is_task_editor(user: User, task: Task) -> bool:
    """The owner, members of the team it is shared with, and admins; approval still freezes versions."""
    if not user.is_authenticated:
        return False
    if is_admin(user) or task.owner_id == user.pk:
        return True
    return task.team_id is not None and task.team.members.filter(pk=user.pk).exists()


def can_archive_task(user: User, task: Task) -> bool:
    """Archiving withdraws the whole task, so it is the owner's call (or an admin's), not the team's."""
    if not user.is_authenticated:
        return False
    return task.status == TaskStatus.APPROVED and (is_admin(user) or task.owner_id == user.pk)


def can_edit_version(user: User, version: TaskVersion) -> bool:
    return version.is_editable and is_task_editor(user, version.task)


def can_review(user: User) -> bool:
    return has_role(user, Role.REVIEWER)


def can_build_task_sets(user: User) -> bool:
    return has_role(user, Role.RESEARCHER)


def can_view_task_sets(user: User) -> bool:
    """Researchers build task sets; reviewers read them (selectors.task_sets_for decides the same)."""
    return has_role(user, Role.RESEARCHER, Role.REVIEWER)


def can_author(user: User) -> bool:
    return has_role(user, Role.EXPERT)


def can_view_task(user: User, task: Task) -> bool:
    """Mirrors selectors.tasks_for_user for one task."""
    if not user.is_authenticated or not roles_of(user):
        return False
    if is_task_editor(user, task):
        return True
    if has_role(user, Role.REVIEWER) and task.status != TaskStatus.DRAFT:
        return True
    return task.versions.filter(state=TaskStatus.APPROVED).exists()
