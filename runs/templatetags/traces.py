"""Template helpers of the trace pages, and the label counts shown on the run and task pages."""

from __future__ import annotations

import json

from django import template

from runs import trace_selectors
from runs.trace_forms import filters_query

register = template.Library()


@register.filter
def pretty_json(value) -> str:
    """Short arguments on one line, long ones indented."""
    try:
        flat = json.dumps(value, ensure_ascii=False, sort_keys=True)
        return flat if len(flat) <= 100 else json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


@register.inclusion_tag("runs/traces/_label_counts.html", takes_context=True)
def label_counts(context, *, run=None, task=None):
    """Reviewer label counts over the rollouts the viewer may read, of one run or of one task (every version),
    each linking to the trace list filtered on that label."""
    user = context["request"].user
    filters = {"run": run.pk} if run is not None else {"task": task.pk}
    counts = trace_selectors.label_counts(trace_selectors.rollouts_filtered(user=user, filters=filters))
    for row in counts:
        row["query"] = filters_query({**filters, "label": row["label"]})
    return {"counts": counts, "all_query": filters_query({**filters, "label": "any"})}
