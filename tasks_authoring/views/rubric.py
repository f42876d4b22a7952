"""The rubric editor: add, edit, reorder and delete criteria inline; each htmx action re-renders the list."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from tasks_authoring import services
from tasks_authoring.errors import AuthoringError, CriterionError
from tasks_authoring.forms import CRITERION_PARAMS, CriterionForm, param_field_name
from tasks_authoring.views.access import (
    _can_edit,
    _get_criterion_for_editor,
    _get_editable_version,
    _get_task_for_user,
    _get_version,
)


def _rubric_context(request: HttpRequest, version, **extra) -> dict:
    task = version.task
    return {
        "task": task,
        "version": version,
        "criteria": list(version.criteria.order_by("order")),
        "can_edit": _can_edit(request, task),
        "editable": version.is_editable and _can_edit(request, task),
        "add_form": extra.pop("add_form", None)
        or CriterionForm(initial={"kind": "llm_judge", "weight": 1.0}),
        "param_kinds": CRITERION_PARAMS,
        "tab": "rubric",
        **extra,
    }


def _render_rubric(request: HttpRequest, version, status: int = 200, **extra) -> HttpResponse:
    context = _rubric_context(request, version, **extra)
    if request.htmx:
        return render(request, "tasks_authoring/rubric.html#rubric", context, status=status)
    return render(request, "tasks_authoring/rubric.html", context, status=status)


def _apply_service_error(form: CriterionForm, error: AuthoringError) -> None:
    """A service refusal shown next to the field it names; a params problem goes to the param it quotes."""
    if not isinstance(error, CriterionError):
        form.add_error(None, str(error))
        return
    if error.field in form.fields:
        form.add_error(error.field, error.message)
        return
    if error.field == "params":
        kind_params = [name for name, _label, _type in CRITERION_PARAMS[form.cleaned_data["kind"]]]
        quoted = [name for name in kind_params if f"'{name}'" in error.message]
        if quoted or kind_params:
            form.add_error(param_field_name((quoted or kind_params)[0]), error.message)
            return
    form.add_error(None, error.message)


def _criterion_fields(form: CriterionForm) -> dict | None:
    if not form.is_valid():
        return None
    params = form.params()
    if form.errors:
        return None
    return {
        "text": form.cleaned_data["text"],
        "kind": form.cleaned_data["kind"],
        "params": params,
        "weight": form.cleaned_data["weight"],
        "required": form.cleaned_data["required"],
    }


@login_required
@require_GET
def rubric_editor(request: HttpRequest, pk: int) -> HttpResponse:
    task = _get_task_for_user(request, pk)
    version = _get_version(task, None)
    return render(request, "tasks_authoring/rubric.html", _rubric_context(request, version))


@login_required
@require_POST
def criterion_add(request: HttpRequest, pk: int) -> HttpResponse:
    version = _get_editable_version(request, pk)
    form = CriterionForm(request.POST)
    fields = _criterion_fields(form)
    if fields is not None:
        try:
            services.criterion_create(version=version, user=request.user, **fields)
        except AuthoringError as error:
            _apply_service_error(form, error)
        else:
            if not request.htmx:
                return redirect("tasks_authoring:rubric", pk=pk)
            return _render_rubric(request, version)
    return _render_rubric(request, version, status=200 if request.htmx else 400, add_form=form)


@login_required
@require_http_methods(["GET", "POST"])
def criterion_edit(request: HttpRequest, pk: int, criterion_id: int) -> HttpResponse:
    criterion = _get_criterion_for_editor(request, pk, criterion_id)
    version = criterion.version
    if request.method == "GET":
        form = CriterionForm(initial=CriterionForm.initial_for(criterion), prefix=f"c{criterion.pk}")
    else:
        form = CriterionForm(request.POST, prefix=f"c{criterion.pk}")
        fields = _criterion_fields(form)
        if fields is not None:
            try:
                services.criterion_update(criterion=criterion, user=request.user, **fields)
            except AuthoringError as error:
                _apply_service_error(form, error)
            else:
                if not request.htmx:
                    return redirect("tasks_authoring:rubric", pk=pk)
                return _render_rubric(request, version)
    context = _rubric_context(request, version, editing=criterion.pk, edit_form=form)
    if request.htmx:
        return render(request, "tasks_authoring/rubric.html#rubric", context)
    return render(
        request, "tasks_authoring/rubric.html", context, status=200 if request.method == "GET" else 400
    )


@login_required
@require_POST
def criterion_move(request: HttpRequest, pk: int, criterion_id: int) -> HttpResponse:
    criterion = _get_criterion_for_editor(request, pk, criterion_id)
    version = criterion.version
    keys = list(version.criteria.order_by("order").values_list("key", flat=True))
    index = keys.index(criterion.key)
    target = index - 1 if request.POST.get("direction") == "up" else index + 1
    if 0 <= target < len(keys):
        keys[index], keys[target] = keys[target], keys[index]
        services.criterion_reorder(version=version, user=request.user, keys=keys)
    if not request.htmx:
        return redirect("tasks_authoring:rubric", pk=pk)
    return _render_rubric(request, version)


@login_required
@require_POST
def criterion_delete(request: HttpRequest, pk: int, criterion_id: int) -> HttpResponse:
    criterion = _get_criterion_for_editor(request, pk, criterion_id)
    version = criterion.version
    services.criterion_delete(criterion=criterion, user=request.user)
    if not request.htmx:
        return redirect("tasks_authoring:rubric", pk=pk)
    return _render_rubric(request, version)
