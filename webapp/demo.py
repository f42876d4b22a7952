"""Demo users, one per role. Passwords are generated, printed once, and kept in a 0600 file under var/."""

from __future__ import annotations

import secrets
from pathlib import Path

from django.contrib.auth.models import Group, User
from django.db import transaction

from webapp.roles import Role

DEMO_USERS: dict[str, Role] = {
    "expert": Role.EXPERT,
    "researcher": Role.RESEARCHER,
    "reviewer": Role.REVIEWER,
    "admin": Role.ADMIN,
}


@transaction.atomic
def demo_users_ensure(*, credentials_file: Path) -> dict[str, str]:
    """Creates the missing demo users; returns {username: password} for the ones created now."""
    created: dict[str, str] = {}
    for username, role in DEMO_USERS.items():
        if User.objects.filter(username=username).exists():
            continue
        password = secrets.token_urlsafe(9)
        user = User.objects.create_user(
            username=username, password=password, email=f"{username}@demo.practicum.local"
        )
        if role is Role.ADMIN:
            user.is_staff = True
            user.is_superuser = True
            user.save(update_fields=["is_staff", "is_superuser"])
        user.groups.add(Group.objects.get(name=role.value))
        created[username] = password
    if created:
        credentials_file.parent.mkdir(parents=True, exist_ok=True)
        with credentials_file.open("a") as handle:
            for username, password in created.items():
                handle.write(f"{username} {password}\n")
        credentials_file.chmod(0o600)
    return created
