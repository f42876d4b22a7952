"""The launch form: kind, task set and split, the spec's fields (with presets and a JSON view), a live preview."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from rl_engine.spec import SpecProblem
from runs import forms as run_forms
from runs import selectors
from runs.models import RunKind, RunSplit
from runs.permissions import is_admin
from runs.services.launch import RunGateRefused, RunLaunchError, RunSpecInvalid, launch_preview, run_launch
from tasks_authoring.selectors import task_sets_for
from webapp.roles import Role, require_role


def _initial(request: HttpRequest) -> tuple[dict[str, Any], dict[str, Any]]:
    """(form initial, spec) for a GET: a clone of an earlier run, a preset, or the defaults."""
    initial: dict[str, Any] = {"kind": RunKind.EVAL, "split": RunSplit.EVAL}
    if request.GET.get("task_set", "").isdigit():
        initial["task_set"] = int(request.GET["task_set"])
    clone = request.GET.get("clone", "")
    if clone.isdigit():
        source = selectors.run_visible_to(user=request.user, pk=int(clone))
        initial.update(
            kind=source.kind,
            task_set=source.task_set_id,
            split=source.split,
            name=f"Clone of {source.name}"[:200],
            cloned_from=source.pk,
        )
        return initial, run_forms.clone_spec(source)
    preset = run_forms.preset_spec(request.GET.get("preset", ""))
    if preset is not None:
        kind, spec = preset
        initial["kind"] = kind
        initial["split"] = RunSplit.TRAIN if kind == RunKind.TRAIN else RunSplit.EVAL
        return initial, spec
    kind = request.GET.get("kind", "")
    if kind in RunKind.values:
        initial["kind"] = kind
    return initial, run_forms.default_spec(initial["kind"])


def _context(form, spec: dict[str, Any], problems: list[SpecProblem] = (), top: list[str] = ()) -> dict:
    by_field, unplaced = run_forms.problems_by_field(list(problems))
    for loc in run_forms.FORM_LOCS:
        for message in by_field.pop(loc, []):
            if loc in form.fields:
                form.add_error(loc, message)
    return {
        "form": form,
        "sections": run_forms.spec_fields(spec, by_field),
        "spec_json": run_forms.spec_json(spec),
        "top_errors": [*top, *unplaced],
        "presets": [(key, label) for key, (label, _, _) in run_forms.PRESETS.items()],
        "kind": form["kind"].value(),
    }


def _cloned_from(request: HttpRequest, form) -> Any:
    pk = form.cleaned_data.get("cloned_from")
    if not pk:
        return None
    try:
        return selectors.run_visible_to(user=request.user, pk=pk)
    except Http404:
        return None


@login_required
@require_http_methods(["GET", "POST"])
def run_new(request: HttpRequest) -> HttpResponse:
    require_role(request, Role.RESEARCHER)
    task_sets = task_sets_for(user=request.user).order_by("name")
    if request.method == "GET":
        initial, spec = _initial(request)
        form = run_forms.LaunchForm(initial=initial, task_sets=task_sets)
        return render(request, "runs/run_new.html", _context(form, spec))
    form = run_forms.LaunchForm(request.POST, task_sets=task_sets)
    spec, json_problem = run_forms.spec_from_post(request.POST)
    problems: list[SpecProblem] = []
    gate_reasons: list[str] = []
    top = [json_problem] if json_problem else []
    if form.is_valid() and not json_problem:
        data = form.cleaned_data
        try:
            run = run_launch(
                user=request.user,
                kind=data["kind"],
                task_set=data["task_set"],
                split=data["split"],
                spec=spec,
                name=data["name"],
                cloned_from=_cloned_from(request, form),
                gate_override_reason=request.POST.get("gate_override_reason", ""),
            )
        except RunSpecInvalid as error:
            problems = error.problems
        except RunGateRefused as error:
            gate_reasons = error.reasons
        except RunLaunchError as error:
            top.append(str(error))
        else:
            messages.success(request, f"Launched “{run.name}”. It is queued; this page updates as it runs.")
            return redirect("runs:run_detail", pk=run.pk)
    spec["kind"] = form["kind"].value()
    context = _context(form, spec, problems, top)
    context.update(
        gate_reasons=gate_reasons,
        can_override_gate=is_admin(request.user),
        gate_override_reason=request.POST.get("gate_override_reason", ""),
    )
    return render(request, "runs/run_new.html", context, status=400)


@login_required
@require_POST
def run_new_preview(request: HttpRequest) -> HttpResponse:
    """What the run would do (tasks, steps, rollouts) or every problem, for the form as it stands."""
    require_role(request, Role.RESEARCHER)
    task_sets = task_sets_for(user=request.user).order_by("name")
    form = run_forms.LaunchForm(request.POST, task_sets=task_sets)
    spec, json_problem = run_forms.spec_from_post(request.POST)
    preview, problems, top = None, [], [json_problem] if json_problem else []
    if form.is_valid() and not json_problem:
        data = form.cleaned_data
        try:
            preview = launch_preview(
                kind=data["kind"], task_set=data["task_set"], split=data["split"], spec=spec
            )
        except RunSpecInvalid as error:
            problems = error.problems
        except RunLaunchError as error:
            top.append(str(error))
    elif not form.is_valid():
        top += [f"{form.fields[name].label or name}: {' '.join(errs)}" for name, errs in form.errors.items()]
        form.errors.clear()
    spec["kind"] = form["kind"].value()
    context = _context(form, spec, problems, top)
    context.update(preview=preview, use_json=bool(request.POST.get("use_json")))
    return render(request, "runs/run_new.html#preview", context)
