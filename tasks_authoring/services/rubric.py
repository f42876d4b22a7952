"""Rubric criteria of a draft: params validated per kind with the grader's own checks."""

from __future__ import annotations

import math
import re
from typing import Any

from django.db import transaction
from django.db.models import Max

from rl_engine.grading.checks import KINDS, RESERVED_IDS, param_problems

from ..errors import CriterionError
from ..models import Criterion, TaskVersion
from .tasks import require_editable

_KEY_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,49}$")


def _clean(
    version: TaskVersion,
    *,
    text: str,
    kind: str,
    params: dict[str, Any] | None,
    weight: Any,
    key: str,
    exclude: Criterion | None = None,
) -> tuple[str, dict[str, Any], float]:
    if not isinstance(text, str) or not text.strip():
        raise CriterionError("text", "state one checkable fact, e.g. “States the IRR is 32.66%”")
    if kind not in KINDS:
        raise CriterionError("kind", f"unknown kind {kind!r}; known kinds: {', '.join(KINDS)}")
    if params is not None and not isinstance(params, dict):
        raise CriterionError("params", "params must be an object of named values")
    params = dict(params or {})
    problems = param_problems(kind, params)
    if problems:
        raise CriterionError("params", "; ".join(problems))
    try:
        weight = float(weight)
    except (TypeError, ValueError):
        raise CriterionError("weight", f"weight must be a number, got {weight!r}") from None
    if not math.isfinite(weight) or weight <= 0:
        raise CriterionError("weight", f"weight must be a positive number, got {weight!r}")
    if not _KEY_PATTERN.match(key):
        raise CriterionError("key", f"{key!r} is not a valid id (a letter, then letters, digits, - or _)")
    if key in RESERVED_IDS:
        raise CriterionError("key", f"the ids {', '.join(RESERVED_IDS)} are reserved")
    clash = version.criteria.filter(key=key)
    if exclude is not None:
        clash = clash.exclude(pk=exclude.pk)
    if clash.exists():
        raise CriterionError("key", f"the id {key!r} is already used in this rubric")
    return text.strip(), params, weight


def _next_key(version: TaskVersion) -> str:
    used = set(version.criteria.values_list("key", flat=True))
    number = version.criteria.count() + 1
    while f"c{number}" in used:
        number += 1
    return f"c{number}"


@transaction.atomic
def criterion_create(
    *,
    version: TaskVersion,
    user,
    text: str,
    kind: str,
    params: dict[str, Any] | None = None,
    weight: Any = 1.0,
    required: bool = False,
    key: str = "",
) -> Criterion:
    """Appends a criterion (the first one is the primary objective); CriterionError names the bad field."""
    require_editable(version, user)
    key = key or _next_key(version)
    text, params, weight = _clean(version, text=text, kind=kind, params=params, weight=weight, key=key)
    order = (version.criteria.aggregate(last=Max("order"))["last"] + 1) if version.criteria.exists() else 0
    return Criterion.objects.create(
        version=version,
        order=order,
        key=key,
        text=text,
        kind=kind,
        params=params,
        weight=weight,
        required=bool(required),
    )


@transaction.atomic
def criterion_update(*, criterion: Criterion, user, **fields: Any) -> Criterion:
    """Edits text, kind, params, weight, required or key; the whole criterion is validated again."""
    require_editable(criterion.version, user)
    unknown = sorted(set(fields) - {"text", "kind", "params", "weight", "required", "key"})
    if unknown:
        raise CriterionError(unknown[0], "is not a field of a criterion")
    merged = {
        "text": fields.get("text", criterion.text),
        "kind": fields.get("kind", criterion.kind),
        "params": fields.get("params", criterion.params),
        "weight": fields.get("weight", criterion.weight),
        "key": fields.get("key", criterion.key),
    }
    text, params, weight = _clean(criterion.version, exclude=criterion, **merged)
    criterion.text, criterion.kind, criterion.params, criterion.weight = text, merged["kind"], params, weight
    criterion.key = merged["key"]
    criterion.required = bool(fields.get("required", criterion.required))
    criterion.save()
    return criterion


@transaction.atomic
def criterion_delete(*, criterion: Criterion, user) -> None:
    version = criterion.version
    require_editable(version, user)
    criterion.delete()
    _renumber(list(version.criteria.order_by("order")))


@transaction.atomic
def criterion_reorder(*, version: TaskVersion, user, keys: list[str]) -> list[Criterion]:
    """Puts the criteria in the order of `keys` (every key once); the first becomes the primary objective."""
    require_editable(version, user)
    criteria = {c.key: c for c in version.criteria.all()}
    if sorted(keys) != sorted(criteria) or len(set(keys)) != len(keys):
        raise CriterionError(
            "order", f"give every criterion id exactly once; the rubric has {', '.join(sorted(criteria))}"
        )
    ordered = [criteria[key] for key in keys]
    _renumber(ordered)
    return ordered


def _renumber(criteria: list[Criterion]) -> None:
    for order, criterion in enumerate(criteria):
        criterion.order = order
    Criterion.objects.bulk_update(criteria, ["order"])
