"""The task list, the task page (versions, diff, comments in place), creation, status actions, agent view."""

from __future__ import annotations

from collections import defaultdict

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from runs.selectors import task_run_results
from tasks_authoring import selectors, services
from tasks_authoring.errors import AuthoringError
from tasks_authoring.forms import PAGE_SIZE, TaskCreateForm, TaskFilterForm
from tasks_authoring.models import VersionState
from tasks_authoring.views.access import (
    _can_archive,
    _can_edit,
    _can_review,
    _get_task_for_user,
    _get_version,
    _require_authoring_role,
)
from webapp.roles import Role, has_role, require_role


def _version_number(request: HttpRequest, name: str = "v") -> int | None:
    raw = request.GET.get(name, "")
    return int(raw) if raw.isdigit() else None


def _sort_links(current: str) -> dict[str, str]:
    """Per column, the sort its header link sets: a second click on the same column reverses it."""
    links = {}
    for column in ("title", "domain", "status", "owner"):
        links[column] = f"-{column}" if current == column else column
    links["updated"] = "-updated" if current == "updated" else "updated"
    return links


def _sort_marks(current: str) -> dict[str, tuple[str, str]]:
    """The sorted column's aria-sort value and arrow; "updated" on its own means newest first."""
    column = current.lstrip("-")
    descending = current.startswith("-") != (column == "updated")
    return {column: ("descending", "↓") if descending else ("ascending", "↑")}


@login_required
@require_GET
def task_list(request: HttpRequest) -> HttpResponse:
    _require_authoring_role(request)
    form = TaskFilterForm(request.GET)
    filters = form.filters()
    tasks = selectors.tasks_for_list(user=request.user, filters=filters)
    page = Paginator(tasks, PAGE_SIZE).get_page(form.page_number())
    context = {
        "form": form,
        "filters": filters,
        "page": page,
        "sort_links": _sort_links(filters["sort"]),
        "sort_marks": _sort_marks(filters["sort"]),
        "can_create": has_role(request.user, Role.EXPERT),
        "can_build_sets": has_role(request.user, Role.RESEARCHER),
        "filtered": any(filters[key] for key in ("q", "domain", "status", "owner", "band")),
    }
    if request.htmx and not request.htmx.boosted:
        return render(request, "tasks_authoring/task_list.html#results", context)
    return render(request, "tasks_authoring/task_list.html", context)


@login_required
@require_http_methods(["GET", "POST"])
def task_create(request: HttpRequest) -> HttpResponse:
    require_role(request, Role.EXPERT)
    form = TaskCreateForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        try:
            task = services.task_create(owner=request.user, **form.cleaned_data)
        except AuthoringError as error:
            form.add_error(None, str(error))
            return render(request, "tasks_authoring/task_create.html", {"form": form}, status=400)
        messages.success(
            request, f"Created “{task.title}”. Write the instruction, then add files and criteria."
        )
        return redirect("tasks_authoring:task_edit", pk=task.pk)
    return render(request, "tasks_authoring/task_create.html", {"form": form})


def _comments_in_place(reviews) -> dict:
    """Review comments grouped by what they are about, so the page shows each one where it belongs."""
    by_criterion: dict[int, list] = defaultdict(list)
    by_file: dict[int, list] = defaultdict(list)
    general = []
    for review in reviews:
        if review.criterion_id:
            by_criterion[review.criterion_id].append(review)
        elif review.world_file_id:
            by_file[review.world_file_id].append(review)
        else:
            general.append(review)
    return {"by_criterion": dict(by_criterion), "by_file": dict(by_file), "general": general}


@login_required
@require_GET
def task_detail(request: HttpRequest, pk: int) -> HttpResponse:
    task = _get_task_for_user(request, pk)
    version = _get_version(task, _version_number(request))
    versions = list(task.versions.select_related("created_by").order_by("-number"))
    latest = versions[0]
    reviews = version.reviews.select_related("reviewer", "criterion", "world_file").order_by("created_at")
    can_edit = _can_edit(request, task)
    context = {
        "task": task,
        "version": version,
        "latest": latest,
        "versions": versions,
        "files": version.world_files.select_related("blob").order_by("path"),
        "criteria": version.criteria.order_by("order"),
        "comments": _comments_in_place(reviews),
        "can_edit": can_edit,
        "can_submit": can_edit and version == latest and version.state == VersionState.DRAFT,
        "can_new_draft": can_edit
        and version == latest
        and version.state in (VersionState.APPROVED, VersionState.CHANGES_REQUESTED),
        "can_review": _can_review(request) and version.state == VersionState.IN_REVIEW,
        "can_export": version.state == VersionState.APPROVED,
        "can_archive": _can_archive(request, task),
        "tab": "overview",
        "run_results": task_run_results(user=request.user, task=task),
    }
    return render(request, "tasks_authoring/task_detail.html", context)


@login_required
@require_GET
def version_diff(request: HttpRequest, pk: int) -> HttpResponse:
    task = _get_task_for_user(request, pk)
    new = _get_version(task, _version_number(request, "to"))
    old_number = _version_number(request, "from")
    if old_number is None:
        old_number = max(new.number - 1, 1)
    old = _get_version(task, old_number)
    diff = selectors.version_diff(old=old, new=new)
    versions = task.versions.order_by("-number").values_list("number", flat=True)
    context = {
        "task": task,
        "old": old,
        "new": new,
        "diff": diff,
        "version_numbers": list(versions),
        "can_edit": _can_edit(request, task),
        "tab": "overview",
    }
    return render(request, "tasks_authoring/version_diff.html", context)


@login_required
@require_POST
def task_submit(request: HttpRequest, pk: int) -> HttpResponse:
    task = _get_task_for_user(request, pk)
    version = _get_version(task, None)
    if not _can_edit(request, task) or version.state != VersionState.DRAFT:
        messages.error(
            request,
            f"Version {version.number} is {version.get_state_display().lower()}; it cannot be submitted.",
        )
        return redirect("tasks_authoring:task_detail", pk=task.pk)
    try:
        services.task_version_submit(version=version, user=request.user)
    except AuthoringError as error:
        messages.error(request, f"Not submitted: {error}")
    else:
        messages.success(request, f"Version {version.number} is waiting for a reviewer.")
    return redirect("tasks_authoring:task_detail", pk=task.pk)


@login_required
@require_POST
def task_new_draft(request: HttpRequest, pk: int) -> HttpResponse:
    task = _get_task_for_user(request, pk)
    if not _can_edit(request, task):
        messages.error(request, "Only the task's author and their team can open a new draft.")
        return redirect("tasks_authoring:task_detail", pk=task.pk)
    try:
        draft = services.task_version_new_draft(task=task, user=request.user)
    except AuthoringError as error:
        messages.error(request, f"No new draft: {error}")
        return redirect("tasks_authoring:task_detail", pk=task.pk)
    messages.success(
        request, f"Version {draft.number} is a new draft copied from version {draft.number - 1}."
    )
    return redirect("tasks_authoring:task_edit", pk=task.pk)


@login_required
@require_http_methods(["GET", "POST"])
def task_archive(request: HttpRequest, pk: int) -> HttpResponse:
    """A confirmation page, then the archive itself; only the owner and admins, only approved tasks."""
    task = _get_task_for_user(request, pk)
    if not _can_archive(request, task):
        raise PermissionDenied("Only the owner of an approved task, or an admin, can archive it")
    if request.method == "POST":
        try:
            services.task_archive(task=task, user=request.user)
        except AuthoringError as error:
            messages.error(request, f"Not archived: {error}.")
        else:
            messages.success(
                request,
                f"Archived “{task.title}”. It is hidden from the task list and from new task sets; "
                "task sets that already pin it keep it.",
            )
        return redirect("tasks_authoring:task_detail", pk=task.pk)
    context = {"task": task, "version": _get_version(task, None), "tab": "overview"}
    return render(request, "tasks_authoring/task_archive.html", context)


def _file_tree(files) -> list[dict]:
    """Rows of a folder tree in path order: each folder once, before its files, indented by depth."""
    rows: list[dict] = []
    seen_folders: set[str] = set()
    for world_file in files:
        parts = world_file.path.split("/")
        for depth in range(len(parts) - 1):
            folder = "/".join(parts[: depth + 1])
            if folder not in seen_folders:
                seen_folders.add(folder)
                rows.append({"depth": depth, "name": parts[depth] + "/", "folder": True})
        rows.append({"depth": len(parts) - 1, "name": parts[-1], "folder": False, "file": world_file})
    return rows


@login_required
@require_GET
def agent_view(request: HttpRequest, pk: int) -> HttpResponse:
    task = _get_task_for_user(request, pk)
    version = _get_version(task, _version_number(request))
    files = version.world_files.select_related("blob").order_by("path")
    context = {
        "task": task,
        "version": version,
        "tree": _file_tree(files),
        "can_edit": _can_edit(request, task),
        "tab": "agent",
    }
    return render(request, "tasks_authoring/agent_view.html", context)
