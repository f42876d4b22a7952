"""Task sets: a frozen list of approved versions with a seeded train/eval split."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from tasks_authoring import selectors, services
from tasks_authoring.errors import AuthoringError
from tasks_authoring.forms import TaskFilterForm, TaskSetForm
from tasks_authoring.views.access import TASK_SET_ROLES, _get_task_set_for_user
from webapp.roles import Role, has_role, require_role

_BUILDER_LIMIT = 500


@login_required
@require_GET
def task_set_list(request: HttpRequest) -> HttpResponse:
    require_role(request, *TASK_SET_ROLES)
    task_sets = selectors.task_sets_for(user=request.user).order_by("-created_at")
    context = {"task_sets": task_sets, "can_build": has_role(request.user, Role.RESEARCHER)}
    return render(request, "tasks_authoring/task_set_list.html", context)


@login_required
@require_http_methods(["GET", "POST"])
def task_set_create(request: HttpRequest) -> HttpResponse:
    require_role(request, Role.RESEARCHER)
    filter_form = TaskFilterForm(request.GET)
    filters = filter_form.filters()
    candidates = list(selectors.approved_versions(user=request.user, filters=filters)[:_BUILDER_LIMIT])
    choices = [(str(version.pk), f"{version.task.title} · v{version.number}") for version in candidates]
    form = TaskSetForm(
        request.POST or None, version_choices=choices, initial={"seed": 0, "eval_fraction": 0.2}
    )
    if request.method == "POST" and form.is_valid():
        chosen = [version for version in candidates if str(version.pk) in set(form.cleaned_data["versions"])]
        try:
            task_set = services.task_set_create(
                owner=request.user,
                name=form.cleaned_data["name"],
                description=form.cleaned_data["description"],
                versions=None if form.cleaned_data["use_filters"] else chosen,
                filters=filters if form.cleaned_data["use_filters"] else None,
                seed=form.cleaned_data["seed"],
                eval_fraction=form.cleaned_data["eval_fraction"],
            )
        except AuthoringError as error:
            form.add_error(None, str(error))
        else:
            messages.success(request, f"Created the task set “{task_set.name}”.")
            return redirect("tasks_authoring:task_set_detail", pk=task_set.pk)
    context = {
        "form": form,
        "filter_form": filter_form,
        "filters": filters,
        "candidates": candidates,
        "limit": _BUILDER_LIMIT,
    }
    return render(request, "tasks_authoring/task_set_create.html", context)


@login_required
@require_GET
def task_set_detail(request: HttpRequest, pk: int) -> HttpResponse:
    task_set = _get_task_set_for_user(request, pk)
    members = selectors.task_set_members(task_set=task_set).order_by("split", "version__task__title")
    context = {
        "task_set": task_set,
        "members": members,
        "counts": selectors.task_set_counts(task_set=task_set),
    }
    return render(request, "tasks_authoring/task_set_detail.html", context)
