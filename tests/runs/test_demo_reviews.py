"""The demo reviewer's criterion reviews (runs/demo_reviews.py): seeded once the demo evaluation has
ended, on the demo set's oracle and null rollouts only, through the trace viewer's service, once;
the grader-health figures then read them like any review."""

from __future__ import annotations

import pytest

from runs.demo import DEMO_EVAL_RUN, JUDGE_MODEL
from runs.demo_reviews import demo_reviews_ensure, demo_reviews_when_eval_ends
from runs.models import CriterionReview, Rollout, RolloutBody, Run
from runs.quality_selectors import grader_health
from tasks_authoring.demo import DEMO_TASK_SET
from tasks_authoring.services.task_sets import task_set_create
from tests.runs.factories import add_rollout, make_run
from tests.tasks_authoring.data_helpers import approve, draft_with_rubric

pytestmark = pytest.mark.django_db

T, F = True, False
SPEC = {
    "kind": "eval",
    "agent": "oracle",
    "judge": {"base_url": "http://judge.invalid/v1", "model": JUDGE_MODEL},
}


def _graded(run, version, *, policy: str, number_met: bool, judge_met: bool, **fields) -> Rollout:
    rollout = add_rollout(run, version, passed=number_met, split="eval", **fields)
    Rollout.objects.filter(pk=rollout.pk).update(policy=policy)
    rollout.policy = policy
    verdicts = [
        {"criterion_id": "c1", "kind": "number_close", "met": number_met, "weight": 1, "required": True},
        {"criterion_id": "c2", "kind": "llm_judge", "met": judge_met, "weight": 1, "required": False},
    ]
    RolloutBody.objects.filter(rollout=rollout).update(verdicts=verdicts)
    return rollout


@pytest.fixture
def demo(expert, researcher, make_user):
    """The demo set of two tasks, its evaluation run (still running) and one set-up validation."""
    reviewer = make_user("reviewer", "reviewer")
    q0 = approve(draft_with_rubric(expert, title="Revenue question"), expert, reviewer)
    q1 = approve(draft_with_rubric(expert, title="Margin question"), expert, reviewer)
    task_set = task_set_create(owner=researcher, name=DEMO_TASK_SET, versions=[q0, q1], seed=1)
    evaluation = make_run(
        user=researcher, task_set=task_set, kind="eval", status="running", name=DEMO_EVAL_RUN, spec=SPEC
    )
    for version in (q0, q1):
        _graded(evaluation, version, policy="oracle", number_met=T, judge_met=T)
    # A set-up validation of q0: its null agent says "I don't know." and the judge says yes to it.
    validation = make_run(user=expert, task_set=task_set, kind="eval", status="succeeded", spec=SPEC)
    Run.objects.filter(pk=validation.pk).update(kind="validate", task_set=None)
    _graded(validation, q0, policy="null", number_met=F, judge_met=T)
    # Not reviewed: a harness error, a retried attempt, and a run that is not the demo's.
    add_rollout(evaluation, q1, outcome="harness_error", code="JUDGE", sample=1)
    _graded(evaluation, q1, policy="oracle", number_met=F, judge_met=F, final=False, sample=2)
    other = make_run(user=researcher, task_set=task_set, kind="eval", status="succeeded", name="another eval")
    _graded(other, q0, policy="oracle", number_met=T, judge_met=T)
    return {"reviewer": reviewer, "evaluation": evaluation, "validation": validation}


def _finish(run: Run) -> None:
    Run.objects.filter(pk=run.pk).update(status="succeeded")


def test_while_the_evaluation_runs_only_the_ended_validation_is_reviewed(demo):
    assert demo_reviews_when_eval_ends(timeout_s=0) is None
    assert CriterionReview.objects.count() == 0

    assert demo_reviews_ensure() == 2
    assert set(CriterionReview.objects.values_list("rollout__run", flat=True)) == {demo["validation"].pk}


def test_once_the_evaluation_ends_each_verdict_is_reviewed_once_as_demo_data(demo):
    _finish(demo["evaluation"])

    assert demo_reviews_when_eval_ends(timeout_s=0) == 6
    assert demo_reviews_ensure() == 0
    assert demo_reviews_when_eval_ends(timeout_s=0) == 0

    reviews = CriterionReview.objects.all()
    assert {r.reviewer.username for r in reviews} == {"reviewer"}
    assert all(
        r.note.startswith("Demo data, seeded by the demo set-up (not a person's review)") for r in reviews
    )
    null = reviews.get(rollout__policy="null", criterion_id="c2")
    assert (null.grader_met, null.reviewer_met, null.judge_model) == (T, F, JUDGE_MODEL)
    assert "I don't know." in null.note
    assert {r.reviewer_met for r in reviews.filter(rollout__policy="oracle")} == {T}


def test_the_grader_health_figures_read_the_demo_reviews(demo):
    _finish(demo["evaluation"])
    demo_reviews_ensure()

    health = grader_health(user=demo["reviewer"])

    # (grader, reviewer): oracle c1, c2 (T, T) ×2; null c1 (F, F), c2 (T, F).
    # p_o = 5/6, p_g = 5/6, p_r = 4/6, p_e = 20/36 + 2/36 = 22/36 → κ = (8/36) / (14/36) = 4/7.
    assert health["overall"] == {
        "reviews": 6,
        "agreed": 5,
        "overturned": 1,
        "rate": pytest.approx(5 / 6),
        "kappa": pytest.approx(4 / 7),
    }
    by_kind = {row["name"]: (row["rate"], row["kappa"]) for row in health["by_kind"]}
    # The judge said yes every time: no better than chance.
    assert by_kind == {"llm_judge": (pytest.approx(2 / 3), pytest.approx(0.0)), "number_close": (1.0, 1.0)}
    assert [(row["name"], row["reviews"]) for row in health["by_judge"]] == [(JUDGE_MODEL, 3)]
    assert {row["name"]: row["reviews"] for row in health["by_task"]} == {
        "Revenue question": 4,
        "Margin question": 2,
    }
    [disagreement] = health["disagreements"]
    assert (disagreement.rollout.policy, disagreement.criterion_id) == ("null", "c2")


def test_without_the_demo_reviewer_nothing_is_seeded(demo):
    _finish(demo["evaluation"])
    demo["reviewer"].username = "someone-else"
    demo["reviewer"].save()

    assert demo_reviews_ensure() == 0
