"""Quality fragments shown inside other apps' pages: a reviewer's verdict box per criterion in the trace
viewer, and the measured-difficulty chart of a task set."""

from __future__ import annotations

from typing import Any

from django import template

from runs import quality_selectors
from runs.services.labels import can_label_rollout

register = template.Library()


def criterion_review_context(request, rollout, criterion_id: str, reviews: list, *, error: str = "") -> dict:
    """The latest review per reviewer (the viewer's own apart); `reviews` are newest first."""
    latest: dict[int, Any] = {}
    for review in reviews:
        latest.setdefault(review.reviewer_id, review)
    return {
        "rollout": rollout,
        "criterion_id": criterion_id,
        "mine": latest.get(request.user.pk),
        "others": [review for reviewer, review in latest.items() if reviewer != request.user.pk],
        "history": len(reviews),
        "can_review": can_label_rollout(request.user, rollout),
        "error": error,
        "return_query": request.POST.get("q_return", "")
        if request.method == "POST"
        else request.GET.urlencode(),
    }


@register.inclusion_tag("runs/quality/_criterion_review.html", takes_context=True)
def criterion_review(context, rollout, criterion_id):
    """Confirm or overturn one criterion's verdict. The rollout's reviews are read once per page."""
    cache = context.render_context
    key = ("criterion_reviews", rollout.pk)
    if key not in cache:
        cache[key] = quality_selectors.criterion_reviews_of(rollout=rollout)
    reviews = cache[key].get(str(criterion_id), [])
    return criterion_review_context(context["request"], rollout, str(criterion_id), reviews)


@register.inclusion_tag("runs/quality/_difficulty_chart.html")
def difficulty_chart(task_set):
    """The task set's members by measured difficulty band, as a bar chart (static/js/runs.js)."""
    task_ids = task_set.members.values_list("version__task_id", flat=True)
    counts = quality_selectors.band_counts(task_ids=task_ids)
    return {
        "counts": counts,
        "charts": {"charts": [quality_selectors.band_chart(counts)]},
        "task_set": task_set,
    }


@register.filter
def band_name(band: str) -> str:
    """A difficulty band's short name ("Too easy"), "Not measured" for none."""
    if not band or band == "unmeasured":
        return "Not measured"
    return quality_selectors.BAND_NAMES.get(band, band)


@register.filter
def model_name(run) -> str:
    """Who acted in the run: the baseline agent or the model, from its spec."""
    return quality_selectors.run_model_name(run)
