"""Demo criterion reviews: the demo reviewer confirms or overturns the grader's verdicts on the demo's
rollouts, so the grader-health page (docs/quality.md, "Judge agreement") has figures on first start.

Demo data, like the demo users and tasks, written through the trace viewer's own service
(`criterion_review_set`), each with a note saying so. The reviewer's word is what is true by
construction, never a guess: the oracle submits the golden answer, which meets every criterion of a
demo task (tests/tasks_authoring/test_demo.py checks the deterministic ones; the judged ones were
written from it); the null agent submits "I don't know.", which meets none. Reviewed: the final
graded rollouts of those two policies on the demo task set's versions, in the demo's oracle
evaluation run once it has ended and in the set-up validations. The evaluation alone gives one
class ("met") to every item, so kappa would be undefined; the validations' null rollouts give the
other, and show how often the demo judge says yes to an answer that says nothing.
"""

from __future__ import annotations

import time

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q, QuerySet

from tasks_authoring.demo import DEMO_TASK_SET
from tasks_authoring.models import TaskSetMember

from .demo import DEMO_EVAL_RUN
from .models import FINAL_STATUSES, CriterionReview, Rollout, RolloutBody, Run, RunKind
from .services.quality import criterion_review_set

DEMO_REVIEWER = "reviewer"
# policy → (what the reviewer says of every criterion, why)
TRUTH: dict[str, tuple[bool, str]] = {
    "oracle": (True, "the oracle submitted the golden answer, which meets every criterion of this task"),
    "null": (False, "the null agent answered \u201cI don't know.\u201d, which meets no criterion"),
}
NOTE = "Demo data, seeded by the demo set-up (not a person's review): {why}."
EVAL_WAIT_SECONDS = 30 * 60
POLL_SECONDS = 5


def demo_eval_run() -> Run | None:
    return Run.objects.filter(name=DEMO_EVAL_RUN, kind=RunKind.EVAL).order_by("-pk").first()


def demo_review_rollouts() -> QuerySet[Rollout]:
    """The final graded oracle and null rollouts of the demo set's versions, in the ended demo
    evaluation run and in the ended validations."""
    return Rollout.objects.filter(
        Q(run__kind=RunKind.EVAL, run__name=DEMO_EVAL_RUN) | Q(run__kind=RunKind.VALIDATE),
        run__status__in=FINAL_STATUSES,
        task_version__in=TaskSetMember.objects.filter(task_set__name=DEMO_TASK_SET).values("version"),
        final=True,
        outcome="graded",
        policy__in=list(TRUTH),
    ).order_by("pk")


@transaction.atomic
def demo_reviews_ensure() -> int:
    """The demo reviewer reviews every graded criterion of the demo rollouts it has not reviewed yet;
    returns how many reviews were added (0 when there is nothing new, or no demo reviewer)."""
    reviewer = User.objects.filter(username=DEMO_REVIEWER).first()
    if reviewer is None:
        return 0
    rollouts = list(demo_review_rollouts())
    reviewed = set(
        CriterionReview.objects.filter(reviewer=reviewer, rollout__in=rollouts).values_list(
            "rollout_id", "criterion_id"
        )
    )
    verdicts = dict(RolloutBody.objects.filter(rollout__in=rollouts).values_list("rollout_id", "verdicts"))
    added = 0
    for rollout in rollouts:
        met, why = TRUTH[rollout.policy]
        for verdict in verdicts.get(rollout.pk) or []:
            criterion_id = str(verdict.get("criterion_id"))
            if not isinstance(verdict.get("met"), bool) or (rollout.pk, criterion_id) in reviewed:
                continue
            criterion_review_set(
                rollout=rollout,
                user=reviewer,
                criterion_id=criterion_id,
                reviewer_met=met,
                note=NOTE.format(why=why),
            )
            added += 1
    return added


def demo_reviews_when_eval_ends(
    *, timeout_s: float = EVAL_WAIT_SECONDS, poll_s: float = POLL_SECONDS
) -> int | None:
    """Waits (at most `timeout_s`, asking every `poll_s`) for the demo evaluation run to end, then seeds
    the reviews; returns how many were added, or None when the run was never launched or did not end
    in time (the next start of the demo seeds them then)."""
    deadline = time.monotonic() + timeout_s
    while True:
        run = demo_eval_run()
        if run is None:
            return None
        if run.status in FINAL_STATUSES:
            return demo_reviews_ensure()
        if time.monotonic() >= deadline:
            return None
        time.sleep(poll_s)
