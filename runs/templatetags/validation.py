"""The validation checklist of a task version, shown on the task page and in the review queue."""

from __future__ import annotations

from typing import Any

from django import template

from runs.models import ValidationStatus, VersionValidation
from runs.permissions import is_admin
from runs.services.validation import FINISHED, version_approval_problem
from tasks_authoring.permissions import can_review, is_task_editor

register = template.Library()


def validation_card_context(request, version) -> dict[str, Any]:
    """What the task page's validation card shows; also the context of its polling partial."""
    user = request.user
    validations = list(
        version.validations.select_related("run", "requested_by", "overridden_by").order_by(
            "-created_at", "-pk"
        )[:5]
    )
    latest = validations[0] if validations else None
    can_validate = bool(version.content_hash) and (is_task_editor(user, version.task) or can_review(user))
    return {
        "task": version.task,
        "version": version,
        "validation": latest,
        "earlier": validations[1:],
        "active": latest is not None and latest.status not in FINISHED,
        "can_validate": can_validate and not (latest is not None and latest.status not in FINISHED),
        "can_override": latest is not None
        and is_admin(user)
        and latest.status in (ValidationStatus.FAILED, ValidationStatus.ERROR)
        and latest.overridden_by_id is None,
        "failures": [c for c in latest.checks if not c.get("ok")] if latest else [],
    }


@register.inclusion_tag("runs/validation/_card.html", takes_context=True)
def validation_card(context, version):
    return validation_card_context(context["request"], version)


@register.inclusion_tag("runs/validation/_summary.html")
def validation_summary(version):
    """The review queue's cell: the latest validation's status and its failures' reasons."""
    latest: VersionValidation | None = version.validations.order_by("-created_at", "-pk").first()
    return {
        "version": version,
        "validation": latest,
        "failures": [c for c in latest.checks if not c.get("ok")] if latest else [],
    }


@register.simple_tag
def approval_problem(version) -> str:
    """Why approving the version is refused now ("" when it may be approved)."""
    return version_approval_problem(version) or ""
