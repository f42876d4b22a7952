"""Task-version validation from the task page: validate on demand, the card's polling partial, the admin override."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from runs.models import VersionValidation
from runs.services.validation import (
    FINISHED,
    ValidationRefused,
    version_validation_override,
    version_validation_request,
)
from runs.templatetags.validation import validation_card_context
from tasks_authoring.permissions import can_review, is_task_editor
from tasks_authoring.views.access import _get_task_for_user, _get_version


def _version(request: HttpRequest, pk: int, number: str):
    task = _get_task_for_user(request, pk)
    return _get_version(task, int(number) if number.isdigit() else None)


def _back(version) -> HttpResponse:
    response = redirect("tasks_authoring:task_detail", pk=version.task_id)
    response["Location"] += f"?v={version.number}#validation-card"
    return response


@login_required
@require_POST
def version_validate(request: HttpRequest, pk: int) -> HttpResponse:
    """Validate a submitted version again (its editors and reviewers)."""
    version = _version(request, pk, request.POST.get("v", ""))
    if not (is_task_editor(request.user, version.task) or can_review(request.user)):
        raise PermissionDenied("only the task's editors and reviewers validate it")
    try:
        version_validation_request(version=version, user=request.user, trigger="manual")
    except ValidationRefused as error:
        messages.error(request, f"Not validated: {error}")
    else:
        messages.success(
            request, f"Validating version {version.number}; the checklist appears when it is done."
        )
    return _back(version)


@login_required
@require_GET
def validation_card(request: HttpRequest, pk: int) -> HttpResponse:
    """The task page's validation card; answers 286 (htmx stops polling) once the validation has ended."""
    version = _version(request, pk, request.GET.get("v", ""))
    context = validation_card_context(request, version)
    latest = context["validation"]
    status = 286 if latest is None or latest.status in FINISHED else 200
    return render(request, "runs/validation/_card.html", context, status=status)


@login_required
@require_POST
def validation_override(request: HttpRequest, pk: int) -> HttpResponse:
    validation = get_object_or_404(VersionValidation.objects.select_related("version__task"), pk=pk)
    version = _version(request, validation.version.task_id, str(validation.version.number))
    if version.pk != validation.version_id:
        raise Http404("No such validation")
    try:
        version_validation_override(
            validation=validation, user=request.user, reason=request.POST.get("reason", "")
        )
    except ValidationRefused as error:
        messages.error(request, f"Not overridden: {error}")
    else:
        messages.success(request, f"Validation of version {version.number} overridden; the reason is kept.")
    return _back(version)
