"""Reads for the harness-errors pages: counts by code over time, messages grouped by similarity, tasks hit.

Counts are grouped in SQL over every matching attempt (each one is evidence). Messages are grouped
in Python over the newest SAMPLE errors: a message is reduced to a signature (numbers, paths, ids
and quoted names replaced by placeholders), so "read_pdf hung after 30 s on a.pdf" and "... 31 s on
b.pdf" land in one group. The page says when the grouping saw only a sample.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from django.db.models import Count, Max, Min, Q, QuerySet
from django.db.models.functions import TruncDay, TruncHour, TruncMinute

from .models import Rollout, Run, RunEvent

HARNESS_ERROR = "harness_error"
SAMPLE = 5000
MAX_GROUPS = 50
MAX_TASKS = 50

_PATTERNS = [
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<id>"),
    (re.compile(r"(?:[A-Za-z]:)?(?:[\w.~-]*/)+[\w.~-]+"), "<path>"),
    (re.compile(r"\b0x[0-9a-f]+\b", re.I), "<hex>"),
    (re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{8,}\b", re.I), "<id>"),
    (re.compile(r"'[^'\n]{1,200}'|\"[^\"\n]{1,200}\""), "'<name>'"),
    (re.compile(r"[-+]?\d+(?:[.,]\d+)*(?:e[-+]?\d+)?", re.I), "<n>"),
    (re.compile(r"\s+"), " "),
]
_PLACEHOLDER = re.compile(r"'?<(?:id|path|hex|name|n)>'?")


def message_signature(message: str) -> str:
    signature = message or ""
    for pattern, placeholder in _PATTERNS:
        signature = pattern.sub(placeholder, signature)
    return signature.strip()[:200] or "(no message)"


def signature_search(signature: str) -> str:
    """The longest literal stretch of a signature: a text search that finds the group's traces."""
    pieces = [piece.strip(" :;,.()[]") for piece in _PLACEHOLDER.split(signature)]
    best = max(pieces, key=len, default="")
    return best[:100] if len(best) >= 3 else ""


def harness_errors_in_run(*, run: Run) -> QuerySet[Rollout]:
    return Rollout.objects.filter(run=run, outcome=HARNESS_ERROR)


def _over_time(errors: QuerySet[Rollout], first, last) -> dict[str, Any]:
    span = (last - first) if first and last else timedelta(0)
    if span <= timedelta(hours=3):
        trunc, unit = TruncMinute("created_at"), "minute"
    elif span <= timedelta(days=7):
        trunc, unit = TruncHour("created_at"), "hour"
    else:
        trunc, unit = TruncDay("created_at"), "day"
    rows = (
        errors.annotate(bucket=trunc)
        .values("bucket", "error_code")
        .annotate(count=Count("pk"))
        .order_by("bucket")
    )
    buckets = sorted({row["bucket"] for row in rows})
    index = {bucket: i for i, bucket in enumerate(buckets)}
    series: dict[str, list[int]] = {}
    for row in rows:
        values = series.setdefault(row["error_code"] or "(none)", [0] * len(buckets))
        values[index[row["bucket"]]] = row["count"]
    return {
        "unit": unit,
        "x": [int(bucket.timestamp()) for bucket in buckets],
        "series": [{"label": code, "values": values} for code, values in sorted(series.items())],
    }


def harness_errors_overview(*, errors: QuerySet[Rollout], sample: int = SAMPLE) -> dict[str, Any]:
    """Codes (with counts, final attempts, runs hit, first and last seen), counts over time per code,
    the tasks hit per code, and message groups over the newest `sample` errors."""
    errors = errors.order_by()
    codes = list(
        errors.values("error_code")
        .annotate(
            count=Count("pk"),
            final_count=Count("pk", filter=Q(final=True)),
            runs=Count("run", distinct=True),
            first=Min("created_at"),
            last=Max("created_at"),
        )
        .order_by("-count", "error_code")
    )
    total = sum(code["count"] for code in codes)
    first = min((code["first"] for code in codes), default=None)
    last = max((code["last"] for code in codes), default=None)
    tasks = list(
        errors.values("task_name", "task_version_id", "error_code")
        .annotate(count=Count("pk"), runs=Count("run", distinct=True))
        .order_by("-count", "task_name")[:MAX_TASKS]
    )
    recent = list(
        errors.order_by("-pk").values(
            "pk", "run_id", "error_code", "message", "task_name", "step", "created_at"
        )[:sample]
    )
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for row in recent:
        key = (row["error_code"], message_signature(row["message"]))
        group = groups.get(key)
        if group is None:
            group = groups[key] = {
                "code": key[0],
                "signature": key[1],
                "search": signature_search(key[1]),
                "count": 0,
                "example": row,
                "examples": [],
                "tasks": {},
                "runs": set(),
                "first": row["created_at"],
            }
        group["count"] += 1
        group["first"] = row["created_at"]  # rows come newest first
        group["runs"].add(row["run_id"])
        group["tasks"][row["task_name"]] = group["tasks"].get(row["task_name"], 0) + 1
        if len(group["examples"]) < 3:
            group["examples"].append(row)
    ordered = sorted(groups.values(), key=lambda g: (-g["count"], g["code"], g["signature"]))[:MAX_GROUPS]
    for group in ordered:
        group["runs"] = len(group["runs"])
        group["tasks"] = sorted(group["tasks"].items(), key=lambda item: (-item[1], item[0]))
    return {
        "total": total,
        "codes": codes,
        "tasks": tasks,
        "groups": ordered,
        "groups_total": len(groups),
        "sampled": len(recent),
        "sample_is_partial": total > len(recent),
        "over_time": _over_time(errors, first, last) if codes else None,
    }


def bundle_failures(*, run: Run, limit: int = 20) -> list[dict[str, Any]]:
    """Task bundles that failed to load (BUNDLE_INVALID): no rollout exists for them, only the event."""
    return list(
        RunEvent.objects.filter(run=run, type="harness_error", payload__has_key="task")
        .exclude(payload__has_key="summary")
        .exclude(payload__has_key="sample")
        .order_by("seq")
        .values_list("payload", flat=True)[:limit]
    )
