"""Roles are Django groups (created by migration 0001). Views ask this module, never the groups directly."""

from __future__ import annotations

from enum import StrEnum

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import Http404, HttpRequest


class Role(StrEnum):
    EXPERT = "expert"
    RESEARCHER = "researcher"
    REVIEWER = "reviewer"
    ADMIN = "admin"


def roles_of(user: AbstractBaseUser | AnonymousUser) -> frozenset[Role]:
    if not user.is_authenticated:
        return frozenset()
    cached = getattr(user, "_practicum_roles", None)
    if cached is None:
        names = set(user.groups.values_list("name", flat=True))
        if user.is_superuser:
            names.add(Role.ADMIN)
        cached = frozenset(Role(name) for name in names if name in Role._value2member_map_)
        user._practicum_roles = cached
    return cached


def has_role(user: AbstractBaseUser | AnonymousUser, *roles: Role) -> bool:
    """True when the user holds any of `roles`; admins hold every role."""
    held = roles_of(user)
    return Role.ADMIN in held or any(role in held for role in roles)


def require_role(request: HttpRequest, *roles: Role) -> None:
    """Outsiders get 404, not 403, so they cannot tell what exists."""
    if not has_role(request.user, *roles):
        raise Http404("Not found")


# The navigation each role sees: (label, url name, roles that may use it). Later issues add entries.
NAVIGATION: list[tuple[str, str, tuple[Role, ...]]] = [
    ("Home", "home", ()),
    ("Tasks", "tasks_authoring:task_list", (Role.EXPERT, Role.RESEARCHER, Role.REVIEWER)),
    ("Review queue", "tasks_authoring:review_queue", (Role.REVIEWER,)),
    ("Task sets", "tasks_authoring:task_set_list", (Role.RESEARCHER, Role.REVIEWER)),
    ("Runs", "runs:run_list", (Role.EXPERT, Role.RESEARCHER, Role.REVIEWER)),
    ("Traces", "runs:trace_list", (Role.EXPERT, Role.RESEARCHER, Role.REVIEWER)),
    ("Quality", "runs:quality", (Role.RESEARCHER, Role.REVIEWER)),
    ("Health", "health", (Role.ADMIN,)),
    ("Admin", "admin:index", (Role.ADMIN,)),
]


def navigation(request: HttpRequest) -> dict:
    """Template context processor: the nav entries this user may see."""
    from django.urls import reverse

    user = request.user
    if not user.is_authenticated:
        return {"nav_items": [], "user_roles": []}
    items = []
    for label, url_name, roles in NAVIGATION:
        if roles and not has_role(user, *roles):
            continue
        items.append({"label": label, "url": reverse(url_name), "name": url_name})
    return {"nav_items": items, "user_roles": sorted(roles_of(user))}
