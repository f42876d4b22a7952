"""Forms of the runs pages: list filters from the URL, and the launch form built from the run spec's schema.

The launch form's spec fields are not Django form fields: their raw values go into the spec dict and
`rl_engine.spec.parse_run_spec` (through the launch service) is the one validator, so every problem
comes back with the dotted location of its field (`SpecProblem.loc`) and is shown under that field.
"""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass, field
from typing import Any

from django import forms

from rl_engine.spec import RunSpec, SpecProblem, run_spec_json_schema

from .models import Run, RunKind, RunSplit, RunStatus

PAGE_SIZE = 25
MAX_PAGE = 10_000

RUN_SORT_LABELS: dict[str, str] = {
    "-created": "Newest",
    "created": "Oldest",
    "name": "Name A–Z",
    "-name": "Name Z–A",
    "status": "Status",
    "-reward": "Reward, highest first",
    "reward": "Reward, lowest first",
    "-pass": "Pass@1, highest first",
    "pass": "Pass@1, lowest first",
    "-errors": "Harness errors, most first",
    "errors": "Harness errors, fewest first",
}


class RunFilterForm(forms.Form):
    """The run list's filters, read from the URL. Anything out of range falls back to its default."""

    status = forms.ChoiceField(required=False, choices=[("", "Any status"), *RunStatus.choices])
    kind = forms.ChoiceField(required=False, choices=[("", "Any kind"), *RunKind.choices])
    task_set = forms.TypedChoiceField(required=False, coerce=int, empty_value=None)
    mine = forms.BooleanField(required=False, label="Only mine")
    sort = forms.ChoiceField(required=False, choices=list(RUN_SORT_LABELS.items()))
    page = forms.IntegerField(required=False, min_value=1)

    def __init__(self, data: Any = None, *, task_sets=(), **kwargs: Any) -> None:
        super().__init__(data, **kwargs)
        self.fields["task_set"].choices = [("", "Any task set"), *((str(ts.pk), ts.name) for ts in task_sets)]

    def filters(self) -> dict[str, Any]:
        """The cleaned filters; a field that did not validate is dropped, never an error page."""
        self.is_valid()
        cleaned = getattr(self, "cleaned_data", {})
        return {
            "status": cleaned.get("status") or "",
            "kind": cleaned.get("kind") or "",
            "task_set": cleaned.get("task_set"),
            "mine": bool(cleaned.get("mine")),
            "sort": cleaned.get("sort") or "-created",
        }

    def page_number(self) -> int:
        self.is_valid()
        return min(getattr(self, "cleaned_data", {}).get("page") or 1, MAX_PAGE)


class LaunchForm(forms.Form):
    """What is not in the spec: the run's name, kind, task set and split (and the run it was cloned from)."""

    name = forms.CharField(
        required=False, max_length=200, help_text="Leave empty for a name from kind, set and time."
    )
    kind = forms.ChoiceField(choices=RunKind.choices)
    task_set = forms.ModelChoiceField(queryset=None, empty_label="Choose a task set")
    split = forms.ChoiceField(choices=RunSplit.choices, initial=RunSplit.EVAL)
    cloned_from = forms.IntegerField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, task_sets=None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["task_set"].queryset = task_sets
        self.fields[
            "split"
        ].help_text = "Eval and validation runs use this split; training uses train and evaluates on eval."


# -- the spec's fields in the form ------------------------------------------------------------------

# (legend, kinds the fieldset matters for (empty: all), dotted spec paths).
SPEC_SECTIONS: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = [
    (
        "Agent and model",
        (),
        (
            "agent",
            "model.builtin",
            "model.path",
            "model.dtype",
            "inference.backend",
            "inference.base_url",
            "inference.served_model_name",
            "inference.max_batch_size",
        ),
    ),
    ("Sampling", (), ("sampling.temperature", "sampling.top_p", "sampling.max_new_tokens_per_turn")),
    (
        "Batch and steps",
        ("train",),
        (
            "max_steps",
            "batch.prompts_per_step",
            "batch.samples_per_prompt",
            "batch.mini_batches",
            "batch.update_epochs",
            "batch.micro_batch_size",
        ),
    ),
    (
        "Algorithm",
        ("train",),
        (
            "algorithm.advantage_estimator",
            "algorithm.norm_adv_by_std",
            "algorithm.policy_loss",
            "algorithm.eps_clip_low",
            "algorithm.eps_clip_high",
            "algorithm.loss_reduction",
            "algorithm.kl_coef",
            "algorithm.kl_estimator",
            "algorithm.harness_error_masking",
            "algorithm.zero_variance_filter",
        ),
    ),
    (
        "Optimiser",
        ("train",),
        ("optimizer.lr", "optimizer.warmup_steps", "optimizer.weight_decay", "optimizer.grad_clip"),
    ),
    (
        "Evaluation",
        (),
        (
            "evaluation.samples_per_task",
            "evaluation.pass_at_k",
            "evaluation.every_steps",
            "evaluation.at_start",
            "evaluation.temperature",
        ),
    ),
    ("Checkpoints", ("train",), ("checkpoint.every_steps", "checkpoint.keep_last")),
    (
        "Resources",
        (),
        (
            "resources.rollout_workers",
            "resources.sandboxes_per_worker",
            "resources.inference_engines",
            "resources.gpus_per_engine",
            "resources.trainer_gpus",
            "max_attempts",
            "seed",
        ),
    ),
]
SPEC_PATHS = [path for _, _, paths in SPEC_SECTIONS for path in paths]
# Labels where the field's name does not read well on its own.
LABELS = {
    "model.builtin": "Built-in model",
    "model.path": "Model folder",
    "model.dtype": "Weights dtype",
    "inference.backend": "Inference backend",
    "inference.base_url": "Base URL",
    "inference.max_batch_size": "Generation batch size",
    "evaluation.pass_at_k": "Pass@k (comma-separated k)",
    "evaluation.every_steps": "Evaluate every K steps",
    "evaluation.at_start": "Evaluate before step 1",
    "evaluation.temperature": "Eval temperature",
    "optimizer.lr": "Learning rate",
    "algorithm.kl_coef": "KL coefficient",
    "algorithm.kl_estimator": "KL estimator",
    "algorithm.norm_adv_by_std": "Normalise advantages by std",
    "checkpoint.every_steps": "Checkpoint every K steps",
    "resources.gpus_per_engine": "GPUs per engine",
    "resources.trainer_gpus": "Trainer GPUs",
}
# Fields of the launch form that problems may name besides the spec's.
FORM_LOCS = ("task_set", "split", "kind")


@dataclass
class SpecField:
    path: str
    label: str
    help: str
    input: str  # "number", "text", "checkbox", "select", "list"
    nullable: bool
    choices: list[str] = field(default_factory=list)
    step: str = "any"
    value: Any = None
    errors: list[str] = field(default_factory=list)

    @property
    def dom_id(self) -> str:
        return "f-" + self.path.replace(".", "-")

    @property
    def shown(self) -> str:
        if self.value is None:
            return ""
        if self.input == "list":
            return ", ".join(str(item) for item in self.value)
        return str(self.value)

    def parse(self, raw: str | None) -> Any:
        """The spec value of a posted input; the spec's validator judges it (so "abc" reaches it as is)."""
        if self.input == "checkbox":
            return raw is not None
        text = (raw or "").strip()
        if not text:
            return None if self.nullable else ""
        if self.input == "list":
            return [_number_or_text(item.strip(), integer=True) for item in text.split(",") if item.strip()]
        if self.input == "number":
            return _number_or_text(text, integer=self.step == "1")
        return text


def _number_or_text(text: str, *, integer: bool) -> Any:
    """The number typed, so the JSON view shows numbers; text that is none goes to the validator as it is."""
    try:
        return int(text) if integer else float(text)
    except ValueError:
        return text


@functools.cache
def _schema() -> dict[str, Any]:
    return run_spec_json_schema()


def _resolve(node: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The node behind a $ref or an `X | None` union, and whether null is allowed."""
    defs = _schema()["$defs"]
    nullable = False
    if "anyOf" in node:
        options = [option for option in node["anyOf"] if option.get("type") != "null"]
        nullable = len(options) < len(node["anyOf"])
        node = {**options[0], **{k: v for k, v in node.items() if k != "anyOf"}}
    if "$ref" in node:
        node = {**defs[node["$ref"].rsplit("/", 1)[-1]], **{k: v for k, v in node.items() if k != "$ref"}}
    return node, nullable


def _leaf(path: str) -> tuple[dict[str, Any], bool]:
    node, nullable = _schema(), False
    for part in path.split("."):
        node, nullable = _resolve(node["properties"][part])
    return node, nullable


@functools.cache
def _field_template(path: str) -> SpecField:
    node, nullable = _leaf(path)
    kind = node.get("type")
    if "enum" in node:
        input_type, choices = "select", [str(choice) for choice in node["enum"]]
    elif kind == "boolean":
        input_type, choices = "checkbox", []
    elif kind == "array":
        input_type, choices = "list", []
    elif kind in ("integer", "number"):
        input_type, choices = "number", []
    else:
        input_type, choices = "text", []
    label = LABELS.get(path) or path.rsplit(".", 1)[-1].replace("_", " ").capitalize()
    return SpecField(
        path=path,
        label=label,
        help=node.get("description", ""),
        input=input_type,
        nullable=nullable,
        choices=choices,
        step="1" if kind == "integer" else "any",
    )


def default_spec(kind: str = RunKind.EVAL) -> dict[str, Any]:
    """Every field of RunSpec at its default (from the engine's own models), for `kind`."""
    spec: dict[str, Any] = {"kind": kind}
    for name, model_field in RunSpec.model_fields.items():
        if name == "kind":
            continue
        value = model_field.get_default(call_default_factory=True)
        spec[name] = value.model_dump(mode="json") if hasattr(value, "model_dump") else value
    return spec


def _get(spec: dict[str, Any], path: str) -> Any:
    node: Any = spec
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _set(spec: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = spec
    for part in parents:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[last] = value


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        elif isinstance(value, dict) and merged.get(key) is None and key == "model":
            merged[key] = merge(default_model(), value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def default_model() -> dict[str, Any]:
    return {"path": None, "builtin": None, "builtin_seed": 0, "dtype": "auto"}


def spec_fields(spec: dict[str, Any], problems: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
    """The fieldsets of the form with each field's current value and problems."""
    problems = problems or {}
    sections = []
    for legend, kinds, paths in SPEC_SECTIONS:
        fields = []
        for path in paths:
            item = copy.copy(_field_template(path))
            item.value = _get(spec, path)
            item.errors = problems.get(path, [])
            fields.append(item)
        sections.append({"legend": legend, "kinds": " ".join(kinds), "fields": fields})
    return sections


def spec_from_post(data) -> tuple[dict[str, Any], str | None]:
    """(the spec the form describes, a problem with the JSON view or None).

    The JSON view holds the whole spec; the fields above it win for the keys they show, unless
    "use the JSON as it is" is ticked. Keys without a field (judge, sandbox, ...) come from the JSON.
    """
    raw_json = data.get("spec_json", "")
    try:
        base = json.loads(raw_json) if raw_json.strip() else {}
    except json.JSONDecodeError as error:
        return {}, f"The JSON view is not valid JSON: {error}"
    if not isinstance(base, dict):
        return {}, "The JSON view must hold a JSON object (the whole spec)."
    if data.get("use_json"):
        return base, None
    spec = merge(default_spec(), base)
    for path in SPEC_PATHS:
        _set(spec, path, _field_template(path).parse(data.get(path)))
    model = spec.get("model") or {}
    if model.get("builtin") is None and model.get("path") is None:
        spec["model"] = None  # an agent that is not a model (oracle, null) has none
    return spec, None


def problems_by_field(problems: list[SpecProblem]) -> tuple[dict[str, list[str]], list[str]]:
    """Each problem under the field its dotted `loc` names (or the first field of the section it names)."""
    by_field: dict[str, list[str]] = {}
    top: list[str] = []
    for problem in problems:
        loc = problem.loc
        target = None
        if loc in SPEC_PATHS or loc in FORM_LOCS:
            target = loc
        else:
            parents = [path for path in SPEC_PATHS if loc.startswith(path + ".")]
            children = [path for path in SPEC_PATHS if loc and path.startswith(loc + ".")]
            target = max(parents, key=len) if parents else (children[0] if children else None)
        if target is None:
            top.append(f"{loc}: {problem.message}" if loc else problem.message)
        else:
            by_field.setdefault(target, []).append(problem.message)
    return by_field, top


# -- presets ------------------------------------------------------------------------------------------

PRESETS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "eval-oracle": ("Eval: oracle baseline", RunKind.EVAL, {"agent": "oracle", "model": None}),
    "eval-null": ("Eval: null baseline", RunKind.EVAL, {"agent": "null", "model": None}),
    "eval-tiny": (
        "Eval: tiny model",
        RunKind.EVAL,
        {
            "agent": "model",
            "model": {"builtin": "tiny-llama"},
            "sampling": {"max_new_tokens_per_turn": 64},
            "evaluation": {"samples_per_task": 2, "pass_at_k": [1, 2]},
        },
    ),
    "train-toy-grpo": (
        "Train: toy GRPO (tiny model)",
        RunKind.TRAIN,
        {
            "agent": "model",
            "model": {"builtin": "tiny-llama"},
            "max_steps": 10,
            "sampling": {"temperature": 1.0, "max_new_tokens_per_turn": 32},
            "batch": {"prompts_per_step": 2, "samples_per_prompt": 4, "micro_batch_size": 8},
            "optimizer": {"lr": 1e-4, "weight_decay": 0.0},
            "evaluation": {"every_steps": 5, "at_start": True},
            "checkpoint": {"every_steps": 5},
        },
    ),
    "validate": ("Validate: oracle passes, null fails", RunKind.VALIDATE, {"agent": "oracle", "model": None}),
}


def preset_spec(key: str) -> tuple[str, dict[str, Any]] | None:
    """(kind, spec) of a preset, or None for an unknown key."""
    if key not in PRESETS:
        return None
    _, kind, overrides = PRESETS[key]
    return kind, merge(default_spec(kind), overrides)


def clone_spec(run: Run) -> dict[str, Any]:
    """An earlier run's spec, without the task folders the dispatcher filled in."""
    spec = merge(default_spec(run.kind), run.spec or {})
    spec.pop("tasks", None)
    return spec


def spec_json(spec: dict[str, Any]) -> str:
    shown = {key: value for key, value in spec.items() if key != "tasks"}
    return json.dumps(shown, indent=2, sort_keys=False)


class CompareForm(forms.Form):
    """?runs=1,2,3 (or runs=1&runs=2) and an optional baseline."""

    baseline = forms.IntegerField(required=False)

    @staticmethod
    def run_ids(data) -> list[int]:
        ids: list[int] = []
        for raw in data.getlist("runs"):
            for part in raw.split(","):
                part = part.strip()
                if part.isdigit() and int(part) not in ids:
                    ids.append(int(part))
        return ids
