"""The rubric editor: add, edit, reorder and delete criteria inline; each htmx action re-renders the list.

Beside it, "Try the rubric" grades a candidate answer against the criteria (docs/quality.md)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from runs.models import Rollout
from tasks_authoring import services
from tasks_authoring.errors import AuthoringError, CriterionError
from tasks_authoring.forms import CRITERION_PARAMS, CriterionForm, param_field_name
from tasks_authoring.services import rubric_trial
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


def _trial_context(request: HttpRequest, task) -> dict:
    """The try-it panel's choices; empty for people who may not use it."""
    if not rubric_trial.rubric_try_allowed(user=request.user, task=task):
        return {"can_try": False}
    return {
        "can_try": True,
        "trial_rollouts": rubric_trial.rubric_trial_rollouts(task=task, user=request.user),
    }


@login_required
@require_GET
def rubric_editor(request: HttpRequest, pk: int) -> HttpResponse:
    task = _get_task_for_user(request, pk)
    version = _get_version(task, None)
    context = _rubric_context(request, version, **_trial_context(request, task))
    return render(request, "tasks_authoring/rubric.html", context)


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


@login_required
@require_POST
def rubric_try(request: HttpRequest, pk: int) -> HttpResponse:
    """Grade a typed answer, the golden answer or a real rollout's answer; nothing is stored."""
    task = _get_task_for_user(request, pk)
    if not rubric_trial.rubric_try_allowed(user=request.user, task=task):
        raise PermissionDenied("Only the task's editors and reviewers can try its rubric")
    version = _get_version(task, None)
    source = request.POST.get("source", "typed")
    answer = request.POST.get("answer", "")
    # One byte past the limit is enough for the service to refuse the file by name.
    files = {
        f.name: f.read(rubric_trial.MAX_OUTPUT_FILE_BYTES + 1) for f in request.FILES.getlist("output_files")
    }
    rollout_id = None
    trial, error = None, ""
    if source == "golden":
        answer = version.golden_answer
        if not answer:
            error = "This version has no golden answer yet: write one in the editor."
    elif source == "rollout":
        try:
            rollout_id = int(request.POST.get("rollout", ""))
            answer, files = rubric_trial.rubric_trial_rollout_answer(
                task=task, user=request.user, rollout_id=rollout_id
            )
        except (ValueError, Rollout.DoesNotExist):
            raise Http404("No such rollout of this task in a run you can read") from None
    if not error:
        try:
            trial = rubric_trial.rubric_try(
                version=version, user=request.user, answer=answer, output_files=files
            )
        except AuthoringError as exc:
            error = str(exc)
    context = {
        "trial": trial,
        "trial_answer": answer,
        "trial_error": error,
        "trial_rollout_id": rollout_id,
        "trial_files": sorted(files),
    }
    if request.htmx:
        context.update(task=task, version=version, **_trial_context(request, task))
        return render(request, "tasks_authoring/rubric.html#rubric_trial", context)
    full = _rubric_context(request, version, **_trial_context(request, task), **context)
    return render(request, "tasks_authoring/rubric.html", full, status=400 if error else 200)
