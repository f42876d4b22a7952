"""Personal API tokens: create (the token is shown once), revoke, and authenticate a bearer token."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from webapp.models import ApiToken

TOKEN_PREFIX = "prc_"
MAX_ACTIVE_TOKENS = 20
# last_used_at is for people ("used 3 minutes ago"); writing it on every request would cost a write each.
_LAST_USED_RESOLUTION = timedelta(minutes=1)


class ApiTokenError(Exception):
    """The token cannot be created or revoked; the message says why."""


def _hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


@transaction.atomic
def api_token_create(*, user, name: str) -> tuple[ApiToken, str]:
    """The new token and its secret value, which is never stored and cannot be shown again."""
    name = (name or "").strip()
    if not name:
        raise ApiTokenError("name: give the token a name that says what it is for")
    if len(name) > 100:
        raise ApiTokenError("name: at most 100 characters")
    if ApiToken.objects.filter(user=user, revoked_at__isnull=True).count() >= MAX_ACTIVE_TOKENS:
        raise ApiTokenError(f"you already have {MAX_ACTIVE_TOKENS} active tokens; revoke one first")
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(user=user, name=name, prefix=raw[:12], token_hash=_hash(raw))
    return token, raw


def api_token_revoke(*, token: ApiToken, user) -> ApiToken:
    if token.user_id != user.pk:
        raise ApiTokenError("only the token's owner revokes it")
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token


def api_token_user(raw: str):
    """The active user a bearer token belongs to, or None; records when the token was last used."""
    if not raw.startswith(TOKEN_PREFIX):
        return None
    token = (
        ApiToken.objects.select_related("user")
        .filter(token_hash=_hash(raw), revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if token is None:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > _LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user
