"""Reviewer labels on traces: append-only history, the current label copied onto the rollout for filtering.

Who may label: reviewers (and admins) any rollout they can read, which is every rollout;
researchers the rollouts of their own runs. Experts read their tasks' traces but do not label them.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from webapp.roles import Role, has_role

from ..models import LabelKind, Rollout, RolloutLabel

MAX_NOTE_CHARS = 4000


def can_label_rollout(user, rollout: Rollout) -> bool:
    if not user.is_authenticated:
        return False
    if has_role(user, Role.REVIEWER):  # admins hold every role
        return True
    return has_role(user, Role.RESEARCHER) and rollout.run.launched_by_id == user.pk


def rollout_label_set(*, rollout: Rollout, user, label: str, note: str = "") -> RolloutLabel:
    """Record `label` ("" clears it) with `note` as a new history row and make it the rollout's current label."""
    if not can_label_rollout(user, rollout):
        raise PermissionDenied("Only reviewers, or the researcher who launched the run, may label its traces")
    label = (label or "").strip()
    if label and label not in LabelKind.values:
        raise ValidationError(
            f"Unknown label {label!r}; choose one of {', '.join(LabelKind.values)}, or none"
        )
    note = (note or "").strip()
    if len(note) > MAX_NOTE_CHARS:
        raise ValidationError(f"The note is {len(note)} characters long; at most {MAX_NOTE_CHARS} are kept")
    with transaction.atomic():
        # The row lock orders concurrent labels of one trace, so the current label is the newest row's.
        locked = Rollout.objects.select_for_update().only("pk", "label").get(pk=rollout.pk)
        entry = RolloutLabel.objects.create(rollout=locked, label=label, note=note, author=user)
        locked.label = label
        locked.save(update_fields=["label"])
    rollout.label = label
    return entry
