"""The run list: status, progress and the latest figures (kept by ingestion), filters and sort in the URL."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from runs import selectors
from runs.forms import PAGE_SIZE, RunFilterForm
from runs.views.access import _require_run_reader
from tasks_authoring.selectors import task_sets_for
from webapp.roles import Role, has_role

# Per column, the sort its header sets; a second click on the sorted column reverses it.
_COLUMNS = {
    "created": "-created",
    "name": "name",
    "status": "status",
    "reward": "-reward",
    "pass": "-pass",
    "errors": "-errors",
}


def _sort_links(current: str) -> dict[str, str]:
    links = {}
    for column, first in _COLUMNS.items():
        reverse = first[1:] if first.startswith("-") else f"-{first}"
        links[column] = reverse if current == first else first
    return links


def _sort_marks(current: str) -> dict[str, tuple[str, str]]:
    column = current.lstrip("-")
    return {column: ("descending", "↓") if current.startswith("-") else ("ascending", "↑")}


@login_required
@require_GET
def run_list(request: HttpRequest) -> HttpResponse:
    _require_run_reader(request)
    task_sets = task_sets_for(user=request.user).order_by("name")
    form = RunFilterForm(request.GET, task_sets=task_sets)
    filters = form.filters()
    runs = selectors.runs_for_list(user=request.user, filters=filters)
    page = Paginator(runs, PAGE_SIZE).get_page(form.page_number())
    context = {
        "form": form,
        "filters": filters,
        "page": page,
        "sort_links": _sort_links(filters["sort"]),
        "sort_marks": _sort_marks(filters["sort"]),
        "can_launch": has_role(request.user, Role.RESEARCHER),
        "filtered": any(filters[key] for key in ("status", "kind", "task_set", "mine")),
    }
    if request.htmx and not request.htmx.boosted:
        return render(request, "runs/run_list.html#results", context)
    return render(request, "runs/run_list.html", context)
