"""The editor of a draft: instruction with a live markdown preview, budgets, tools, answers."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from rl_engine.tool_names import TOOL_GROUPS
from tasks_authoring import services
from tasks_authoring.errors import AuthoringError
from tasks_authoring.forms import MarkdownPreviewForm, TaskVersionForm
from tasks_authoring.rendering import render_markdown
from tasks_authoring.views.access import _can_edit, _get_task_for_user, _get_version, _require_authoring_role


@login_required
@require_http_methods(["GET", "POST"])
def task_edit(request: HttpRequest, pk: int) -> HttpResponse:
    task = _get_task_for_user(request, pk)
    version = _get_version(task, None)
    if not _can_edit(request, task) or not version.is_editable:
        messages.info(
            request,
            f"Version {version.number} is {version.get_state_display().lower()} and read-only."
            + (" Open a new draft to change it." if _can_edit(request, task) else ""),
        )
        return redirect("tasks_authoring:task_detail", pk=task.pk)
    form = TaskVersionForm(
        request.POST or None, initial=TaskVersionForm.initial_for(version), user=request.user
    )
    if request.method == "POST" and form.is_valid():
        try:
            services.task_version_update(version=version, user=request.user, **form.version_fields())
        except AuthoringError as error:
            form.add_error(getattr(error, "field", None), str(error))
        else:
            messages.success(request, f"Saved version {version.number}.")
            return redirect("tasks_authoring:task_edit", pk=task.pk)
    tool_groups = [
        (group, [(name, name in (form["tools"].value() or [])) for name in names])
        for group, names in TOOL_GROUPS.items()
    ]
    context = {
        "task": task,
        "version": version,
        "form": form,
        "tool_groups": tool_groups,
        "preview_html": render_markdown(form["instruction"].value() or ""),
        "can_edit": True,
        "tab": "edit",
    }
    return render(request, "tasks_authoring/task_edit.html", context)


@login_required
@require_POST
def markdown_preview(request: HttpRequest) -> HttpResponse:
    _require_authoring_role(request)
    form = MarkdownPreviewForm(request.POST)
    text = form.cleaned_data["instruction"] if form.is_valid() else ""
    return render(request, "tasks_authoring/task_edit.html#preview", {"preview_html": render_markdown(text)})
