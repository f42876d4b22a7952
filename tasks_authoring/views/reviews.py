"""The review queue and the reviewer's decision (approve, request changes, or a comment in place)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from tasks_authoring import selectors, services
from tasks_authoring.errors import AuthoringError
from tasks_authoring.forms import ReviewForm
from tasks_authoring.models import VersionState
from tasks_authoring.views.access import _get_task_for_user, _get_version
from webapp.roles import Role, require_role


def _back(request: HttpRequest, task) -> HttpResponse:
    """Back to the page the reviewer commented from (a file's preview), else the task page."""
    back = request.POST.get("next", "")
    if back and url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
        return redirect(back)
    return redirect("tasks_authoring:task_detail", pk=task.pk)


@login_required
@require_GET
def review_queue(request: HttpRequest) -> HttpResponse:
    require_role(request, Role.REVIEWER)
    versions = selectors.review_queue(reviewer=request.user)
    return render(request, "tasks_authoring/review_queue.html", {"versions": versions})


@login_required
@require_POST
def review_decide(request: HttpRequest, pk: int) -> HttpResponse:
    require_role(request, Role.REVIEWER)
    task = _get_task_for_user(request, pk)
    version = _get_version(task, None)
    if version.state != VersionState.IN_REVIEW:
        messages.error(
            request, f"Version {version.number} is {version.get_state_display().lower()}, not in review."
        )
        return _back(request, task)
    form = ReviewForm(request.POST)
    if not form.is_valid():
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, error)
        return _back(request, task)
    criterion = (
        version.criteria.filter(pk=form.cleaned_data["criterion"]).first()
        if form.cleaned_data["criterion"]
        else None
    )
    world_file = (
        version.world_files.filter(pk=form.cleaned_data["world_file"]).first()
        if form.cleaned_data["world_file"]
        else None
    )
    try:
        services.review_decide(
            version=version,
            reviewer=request.user,
            decision=form.cleaned_data["decision"],
            comment=form.cleaned_data["comment"],
            criterion=criterion,
            world_file=world_file,
        )
    except AuthoringError as error:
        messages.error(request, f"Not recorded: {error}")
    else:
        done = {
            "approve": f"Approved version {version.number}.",
            "request_changes": f"Sent version {version.number} back to its author with your comments.",
            "comment": "Comment added.",
        }
        messages.success(request, done[form.cleaned_data["decision"]])
    return _back(request, task)
