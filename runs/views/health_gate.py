"""Resume a training run that the in-run health gate paused (docs/quality.md, "Health gate")."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from runs.services.dispatch import RunNotResumable
from runs.services.dispatch import run_resume as run_resume_service
from runs.views.access import _get_run_for_user


@login_required
@require_POST
def run_resume(request: HttpRequest, pk: int) -> HttpResponse:
    run = _get_run_for_user(request, pk)
    try:
        run_resume_service(run=run, user=request.user)
    except RunNotResumable as error:
        messages.error(request, f"Not resumed: {error}.")
    else:
        messages.success(request, "Resuming from the checkpoint the pause kept: the run is queued again.")
    return redirect("runs:run_detail", pk=run.pk)
