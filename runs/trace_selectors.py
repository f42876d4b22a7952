"""Reads for the trace pages and the traces API: the filtered rollout list, its keyset pages, prev / next.

Every read starts from `rollouts_visible_to`: reviewers (and admins) read every rollout; researchers
those of their runs; experts only the rollouts of their own tasks (owned or shared with their team),
in whatever run used them, so another team's tasks in the same run stay hidden; everyone else nothing.

Filters touch indexed summary columns only, except the text search, which matches
`RolloutSearchText.text` (trigram-indexed on PostgreSQL; written seconds after ingestion). Pages are keyset pages: a cursor is the
sort value and id of the row at a page's edge, so page 10,000 costs what page 1 costs, and the
total is counted only up to COUNT_CAP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Count, F, Func, IntegerField, Q, QuerySet
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import Coalesce

from rl_engine.outcomes import HarnessCode
from tasks_authoring.models import Criterion, Task, TaskVersion
from webapp.roles import Role, has_role, roles_of

from .models import LabelKind, Rollout, RolloutBody
from .search_text import search_words

MIN_SEARCH_CHARS = 3  # a trigram index cannot narrow a shorter pattern
PAGE_SIZE = 50
HARNESS_OUTCOME = "harness_error"
COUNT_CAP = 10_000

# sort key → (column, descending, nullable). Ties are broken by id in the same direction; a missing
# value (a harness error's reward) sorts last either way.
SORTS: dict[str, tuple[str, bool, bool]] = {
    "-id": ("id", True, False),
    "id": ("id", False, False),
    "step": ("step", False, False),
    "-step": ("step", True, False),
    "-reward": ("reward", True, True),
    "reward": ("reward", False, True),
    "-turns": ("turns", True, False),
    "-tokens": ("tokens", True, False),
    "-duration": ("duration_sec", True, False),
}


def rollouts_visible_to(*, user) -> QuerySet[Rollout]:
    rollouts = Rollout.objects.all()
    if not user.is_authenticated or not roles_of(user):
        return rollouts.none()
    if has_role(user, Role.REVIEWER):  # admins hold every role
        return rollouts
    visible = Q(pk__in=[])
    if has_role(user, Role.RESEARCHER):
        visible |= Q(run__launched_by=user)
    if has_role(user, Role.EXPERT):
        own_tasks = Task.objects.filter(Q(owner=user) | Q(team__members=user)).values("pk")
        visible |= Q(task_version__in=TaskVersion.objects.filter(task__in=own_tasks).values("pk"))
    return rollouts.filter(visible)


def rollouts_filtered(*, user, filters: dict[str, Any]) -> QuerySet[Rollout]:
    """The rollouts `user` may read that match `filters` (RolloutFilterForm.filters(); absent = any).

    Keys: run, task, version, step_min, step_max, sample, split, outcome, error_code, reward_min,
    reward_max, passed (bool), final (bool), label ("none", "any" or a LabelKind), q (text in messages).
    Unordered: order with `rollouts_sorted` or page with `rollout_page`.
    """
    rollouts = rollouts_visible_to(user=user)
    lookups: dict[str, Any] = {}
    for key, lookup in (
        ("run", "run_id"),
        ("version", "task_version_id"),
        ("step_min", "step__gte"),
        ("step_max", "step__lte"),
        ("sample", "sample"),
        ("split", "split"),
        ("outcome", "outcome"),
        ("error_code", "error_code"),
        ("reward_min", "reward__gte"),
        ("reward_max", "reward__lte"),
        ("passed", "passed"),
        ("final", "final"),
    ):
        if filters.get(key) is not None and filters.get(key) != "":
            lookups[lookup] = filters[key]
    code = filters.get("error_code")
    if code and not filters.get("outcome"):
        # A code belongs to one outcome (ingestion checks it): saying so lets the (outcome, error_code)
        # index answer a code filter across runs.
        lookups["outcome"] = HARNESS_OUTCOME if code in HarnessCode.__members__ else "agent_error"
    if filters.get("task"):
        lookups["task_version__in"] = TaskVersion.objects.filter(task_id=filters["task"]).values("pk")
    rollouts = rollouts.filter(**lookups)
    label = filters.get("label")
    if label == "none":
        rollouts = rollouts.filter(label="")
    elif label == "any":
        rollouts = rollouts.filter(label__gt="")
    elif label:
        rollouts = rollouts.filter(label=label)
    for word in search_words(filters.get("q") or ""):
        rollouts = rollouts.filter(search__text__contains=word)
    return rollouts


def _order(sort: str, *, reverse: bool = False) -> list:
    column, descending, nullable = SORTS.get(sort, SORTS["-id"])
    descending ^= reverse
    order = []
    if column != "id":
        expression = F(column).desc if descending else F(column).asc
        # Missing values last in the page order, so first when walking backwards.
        nulls = {"nulls_first": True} if reverse else {"nulls_last": True}
        order.append(expression(**nulls) if nullable else expression())
    order.append(F("id").desc() if descending else F("id").asc())
    return order


def rollouts_sorted(rollouts: QuerySet[Rollout], sort: str) -> QuerySet[Rollout]:
    return rollouts.order_by(*_order(sort))


@dataclass(frozen=True)
class Cursor:
    """A page edge: the sort column's value and the id of the row there (text form `value~id`)."""

    value: float | None
    pk: int

    @classmethod
    def of(cls, rollout: Rollout, sort: str) -> Cursor:
        column = SORTS.get(sort, SORTS["-id"])[0]
        value = getattr(rollout, column)
        return cls(None if value is None else float(value), rollout.pk)

    @classmethod
    def parse(cls, text: str) -> Cursor | None:
        """The cursor, or None for anything malformed (the list then starts at its first page)."""
        value, sep, pk = text.partition("~")
        if not sep or not pk.isdigit():
            return None
        try:
            number = None if value == "n" else float(value)
        except ValueError:
            return None
        if number is not None and not math.isfinite(number):
            return None
        return cls(number, int(pk))

    def __str__(self) -> str:
        value = "n" if self.value is None else repr(self.value)
        return f"{value}~{self.pk}"


def _beyond(sort: str, cursor: Cursor, *, forward: bool) -> Q:
    """The rows after `cursor` in the sort's order (forward) or before it (backward).

    A non-null bound is also written as a plain range (`column >= value`) so the database can start
    an index scan at the cursor instead of filtering from the first row.
    """
    column, descending, nullable = SORTS.get(sort, SORTS["-id"])
    up = forward != descending  # walking towards larger values
    pk_beyond = Q(pk__gt=cursor.pk) if up else Q(pk__lt=cursor.pk)
    if column == "id":
        return pk_beyond
    if cursor.value is None:  # the cursor is among the missing values, which sort last
        return (
            Q(**{f"{column}__isnull": True}) & pk_beyond
            if forward
            else Q(**{f"{column}__isnull": False}) | (Q(**{f"{column}__isnull": True}) & pk_beyond)
        )
    op, strict = ("gte", "gt") if up else ("lte", "lt")
    condition = Q(**{f"{column}__{op}": cursor.value}) & (
        Q(**{f"{column}__{strict}": cursor.value}) | pk_beyond
    )
    if nullable and forward:
        condition |= Q(**{f"{column}__isnull": True})
    return condition


def rollout_page_query(
    rollouts: QuerySet[Rollout], *, sort: str, direction: str, cursor: Cursor | None, size: int = PAGE_SIZE
) -> QuerySet[Rollout]:
    """The one query of a page: the rows beyond the cursor in walking order, one more than the page holds."""
    forward = direction != "before" or cursor is None
    if cursor is not None:
        rollouts = rollouts.filter(_beyond(sort, cursor, forward=forward))
    return rollouts.order_by(*_order(sort, reverse=not forward))[: size + 1]


@dataclass
class RolloutPage:
    items: list[Rollout]
    sort: str
    next_cursor: Cursor | None  # None: this is the last page
    prev_cursor: Cursor | None  # None: this is the first page
    count: int  # rows matching, counted up to COUNT_CAP
    count_capped: bool


def rollout_page(
    rollouts: QuerySet[Rollout],
    *,
    sort: str = "-id",
    direction: str = "after",
    cursor: Cursor | None = None,
    size: int = PAGE_SIZE,
) -> RolloutPage:
    """One keyset page of `rollouts` (filtered, unordered) in `sort` order, starting after or ending
    before `cursor`. One query for the page (a row more than asked says whether there is more) and
    one capped count."""
    sort = sort if sort in SORTS else "-id"
    forward = direction != "before" or cursor is None
    rows = list(rollout_page_query(rollouts, sort=sort, direction=direction, cursor=cursor, size=size))
    more = len(rows) > size
    rows = rows[:size]
    if not forward:
        rows.reverse()
    if forward:
        has_next, has_prev = more, cursor is not None
    else:
        has_next, has_prev = True, more
    count = rollouts.order_by()[: COUNT_CAP + 1].count()
    return RolloutPage(
        items=rows,
        sort=sort,
        next_cursor=Cursor.of(rows[-1], sort) if rows and has_next else None,
        prev_cursor=Cursor.of(rows[0], sort) if rows and has_prev else None,
        count=min(count, COUNT_CAP),
        count_capped=count > COUNT_CAP,
    )


def rollout_neighbours(
    rollouts: QuerySet[Rollout], *, sort: str, rollout: Rollout
) -> tuple[int | None, int | None]:
    """The ids of the rollouts before and after `rollout` in the filtered list's order (None at an end)."""
    sort = sort if sort in SORTS else "-id"
    cursor = Cursor.of(rollout, sort)
    ids = []
    for forward in (False, True):
        ids.append(
            rollouts.filter(_beyond(sort, cursor, forward=forward))
            .order_by(*_order(sort, reverse=not forward))
            .values_list("pk", flat=True)
            .first()
        )
    return ids[0], ids[1]


# The trace viewer ---------------------------------------------------------------------------------

TURNS_PAGE = 10


def _json_array_length(field: str) -> Func:
    function = "JSONB_ARRAY_LENGTH" if connection.vendor == "postgresql" else "JSON_ARRAY_LENGTH"
    return Func(F(field), function=function, output_field=IntegerField())


def rollout_turn_slice(*, rollout: Rollout, start: int, stop: int) -> tuple[list[dict], int]:
    """(turns[start:stop], number of turns), each turn cut out of the stored list by the database by its
    index, so a 200-turn transcript is never sent whole to show ten of its turns."""
    start, stop = max(0, start), max(0, stop)
    annotations = {f"turn_{i}": KeyTransform(str(i), "turns") for i in range(start, max(start, stop))}
    row = (
        RolloutBody.objects.filter(rollout=rollout)
        .annotate(turn_count=Coalesce(_json_array_length("turns"), 0), **annotations)
        .values("turn_count", *annotations)
        .first()
    )
    if row is None:
        return [], 0
    turns = [row[name] for name in annotations if isinstance(row[name], dict)]
    return turns, row["turn_count"]


def rollout_body_meta(*, rollout: Rollout) -> dict[str, Any]:
    """Everything of the body but the turns: verdicts, answer, output files, error detail."""
    row = (
        RolloutBody.objects.filter(rollout=rollout)
        .values("verdicts", "final_answer", "output_files", "error_detail")
        .first()
    )
    return row or {"verdicts": [], "final_answer": None, "output_files": [], "error_detail": ""}


def rollout_rubric(*, rollout: Rollout, verdicts: list[dict]) -> list[dict[str, Any]]:
    """The task version's criteria in order, each with its verdict (met, rationale) when it was graded;
    verdicts for criteria the version does not hold (an unmapped task) are listed after them."""
    by_id = {str(v.get("criterion_id")): v for v in verdicts if isinstance(v, dict)}
    rows = []
    if rollout.task_version_id:
        for criterion in Criterion.objects.filter(version_id=rollout.task_version_id).order_by("order"):
            verdict = by_id.pop(criterion.key, None)
            rows.append(
                {
                    "id": criterion.key,
                    "text": criterion.text,
                    "kind": criterion.kind,
                    "weight": criterion.weight,
                    "required": criterion.required,
                    "primary": criterion.is_primary,
                    "verdict": verdict,
                }
            )
    for key, verdict in by_id.items():
        rows.append(
            {
                "id": key,
                "text": verdict.get("text") or "",
                "kind": verdict.get("kind") or "",
                "weight": verdict.get("weight"),
                "required": bool(verdict.get("required")),
                "primary": False,
                "verdict": verdict,
            }
        )
    return rows


def label_counts(rollouts: QuerySet[Rollout]) -> list[dict[str, Any]]:
    """[{label, name, count}] of the labelled rollouts among `rollouts`, in LabelKind order (one grouped query).

    `label > ''` rather than `label <> ''`: a range the (run, label) index answers, so a run's few
    labelled rollouts are counted without reading its unlabelled ones."""
    counts = dict(rollouts.filter(label__gt="").order_by().values_list("label").annotate(count=Count("pk")))
    return [
        {"label": value, "name": name, "count": counts[value]}
        for value, name in LabelKind.choices
        if counts.get(value)
    ]
