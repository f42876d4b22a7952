"""Judge agreement: Cohen's kappa against hand-computed values, reviews of a criterion's verdict
(append-only, kind and judge model recorded), grouping per task / kind / judge model, the grader
health page, the trace viewer's review box, and who may see and review what."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse

from runs.models import CriterionReview
from runs.quality_selectors import agreement, cohen_kappa, grader_health
from runs.services.quality import criterion_review_set
from tasks_authoring.services.task_sets import task_set_create
from tests.runs.factories import make_run
from tests.runs.grader_helpers import AGREEMENT_ROWS, F, T, agreement_rows, graded_rollout, review_all
from tests.tasks_authoring.data_helpers import approve, draft_with_rubric

pytestmark = pytest.mark.django_db


def _pairs(**counts: int) -> list[tuple[bool, bool]]:
    """yy: both met, yn: grader met and reviewer not, ny, nn."""
    cells = {"yy": (T, T), "yn": (T, F), "ny": (F, T), "nn": (F, F)}
    return [cells[key] for key, count in counts.items() for _ in range(count)]


@pytest.mark.parametrize(
    ("pairs", "kappa"),
    [
        # p_o = 0.7, p_g = 0.5, p_r = 0.6, p_e = 0.5·0.6 + 0.5·0.4 = 0.5 → (0.7 − 0.5) / 0.5
        (_pairs(yy=20, yn=5, ny=10, nn=15), 0.4),
        # p_o = 0.6, p_g = 0.6, p_r = 0.7, p_e = 0.42 + 0.12 = 0.54 → 0.06 / 0.46
        (_pairs(yy=45, yn=15, ny=25, nn=15), 0.06 / 0.46),
        (_pairs(yy=3, nn=2), 1.0),  # perfect, both classes present
        (_pairs(yn=1, ny=1), -1.0),  # always opposite: p_o = 0, p_e = 0.5
        (_pairs(yy=1, yn=1), 0.0),  # the grader always says met: p_o = p_e = 0.5
    ],
)
def test_kappa_matches_hand_computed_values(pairs, kappa):
    assert cohen_kappa(pairs) == pytest.approx(kappa)


@pytest.mark.parametrize("pairs", [[], _pairs(yy=4), _pairs(nn=2)])
def test_kappa_is_undefined_when_there_is_nothing_beyond_chance_to_measure(pairs):
    assert cohen_kappa(pairs) is None


def test_agreement_counts_beside_kappa():
    assert agreement(_pairs(yy=2, yn=1, nn=1)) == {
        "reviews": 4,
        "agreed": 3,
        "overturned": 1,
        "rate": 0.75,
        "kappa": pytest.approx((0.75 - (0.75 * 0.5 + 0.25 * 0.5)) / (1 - 0.5)),
    }
    assert agreement([])["rate"] is None


def _spec(judge: str) -> dict:
    return {
        "kind": "eval",
        "agent": "model",
        "model": {"builtin": "tiny-llama"},
        "judge": {"base_url": "http://judge.invalid/v1", "model": judge},
    }


@pytest.fixture
def world(expert, reviewer, researcher, make_user):
    other = make_user("ezra_expert", "expert")
    versions = {
        "q0": approve(draft_with_rubric(expert, title="Revenue question"), expert, reviewer),
        "q1": approve(draft_with_rubric(expert, title="Margin question"), expert, reviewer),
        "z": approve(draft_with_rubric(other, title="Zeta question"), other, reviewer),
    }
    task_set = task_set_create(owner=researcher, name="Judged set", versions=list(versions.values()), seed=1)
    small = make_run(
        user=researcher, task_set=task_set, kind="eval", status="succeeded", spec=_spec("judge-small")
    )
    large = make_run(
        user=researcher, task_set=task_set, kind="eval", status="succeeded", spec=_spec("judge-large")
    )
    rollouts = {
        "q0": graded_rollout(small, versions["q0"], number_met=T, judge_met=T),
        "q1": graded_rollout(small, versions["q1"], number_met=F, judge_met=F),
        "z": graded_rollout(large, versions["z"], number_met=T, judge_met=T),
    }
    return {"versions": versions, "rollouts": rollouts, "other_expert": other}


def test_a_review_records_the_graders_verdict_its_kind_and_the_runs_judge(world, reviewer):
    rollout = world["rollouts"]["q0"]
    review = criterion_review_set(
        rollout=rollout, user=reviewer, criterion_id="c2", reviewer_met=F, note=" no "
    )
    assert (
        review.criterion_kind,
        review.judge_model,
        review.grader_met,
        review.reviewer_met,
        review.note,
    ) == (
        "llm_judge",
        "judge-small",
        True,
        False,
        "no",
    )
    deterministic = criterion_review_set(rollout=rollout, user=reviewer, criterion_id="c1", reviewer_met=T)
    assert (deterministic.criterion_kind, deterministic.judge_model) == ("number_close", "")


def test_reviews_are_append_only_and_the_latest_counts(world, reviewer):
    review_all(world["rollouts"], reviewer)
    q0 = world["rollouts"]["q0"]
    history = list(
        CriterionReview.objects.filter(rollout=q0, criterion_id="c1").values_list("reviewer_met", "note")
    )
    assert history == [(True, ""), (False, "misread")]
    assert grader_health(user=reviewer)["overall"]["reviews"] == 6


def test_an_ungraded_criterion_cannot_be_reviewed(world, reviewer):
    with pytest.raises(ValidationError, match="'c9' was not graded"):
        criterion_review_set(
            rollout=world["rollouts"]["q0"], user=reviewer, criterion_id="c9", reviewer_met=T
        )


@pytest.mark.parametrize(
    ("persona", "allowed"), [("reviewer", True), ("researcher", True), ("expert", False), ("outsider", False)]
)
def test_who_may_review_a_verdict(world, persona, allowed, request):
    user = request.getfixturevalue(persona)
    review = lambda: criterion_review_set(  # noqa: E731
        rollout=world["rollouts"]["q0"], user=user, criterion_id="c1", reviewer_met=T
    )
    if allowed:
        assert review().reviewer == user
    else:
        with pytest.raises(PermissionDenied):
            review()


def test_agreement_is_grouped_per_kind_per_judge_model_and_per_task(world, reviewer):
    review_all(world["rollouts"], reviewer)
    health = grader_health(user=reviewer)
    for group, rows in AGREEMENT_ROWS.items():
        assert agreement_rows(health[group]) == rows, group
    assert health["overall"]["overturned"] == 2
    r = world["rollouts"]
    assert sorted((d.rollout_id, d.criterion_id) for d in health["disagreements"]) == sorted(
        [(r["q0"].pk, "c2"), (r["z"].pk, "c1")]
    )


def test_the_grader_health_page_shows_figures_and_links_disagreements_to_traces(client, world, reviewer):
    review_all(world["rollouts"], reviewer)
    client.force_login(reviewer)
    page = client.get(reverse("runs:grader_health")).content.decode()
    assert "Grader health" in page and "66.7%" in page and "0.40" in page
    for key in ("q0", "z"):
        assert reverse("runs:trace_detail", args=[world["rollouts"][key].pk]) in page
    assert "no citation" in page and "says 12" in page


def test_an_expert_sees_agreement_on_their_own_tasks_only(client, world, reviewer, expert):
    review_all(world["rollouts"], reviewer)
    client.force_login(expert)
    response = client.get(reverse("runs:grader_health"))
    assert response.status_code == 200
    assert response.context["overall"]["reviews"] == 4
    assert {row["name"] for row in response.context["by_task"]} == {"Revenue question", "Margin question"}
    assert "Zeta question" not in response.content.decode()


def test_outsiders_get_404(client, world, outsider):
    client.force_login(outsider)
    assert client.get(reverse("runs:grader_health")).status_code == 404
    url = reverse("runs:trace_criterion_review", args=[world["rollouts"]["q0"].pk, "c1"])
    assert client.post(url, {"reviewer_met": "yes"}).status_code == 404


def test_the_trace_viewer_lets_a_reviewer_confirm_or_overturn_each_verdict(client, world, reviewer):
    rollout = world["rollouts"]["q0"]
    client.force_login(reviewer)
    page = client.get(reverse("runs:trace_detail", args=[rollout.pk])).content.decode()
    for criterion in ("c1", "c2"):
        assert reverse("runs:trace_criterion_review", args=[rollout.pk, criterion]) in page
    url = reverse("runs:trace_criterion_review", args=[rollout.pk, "c2"])
    fragment = client.post(url, {"reviewer_met": "no", "note": "no citation"}, HTTP_HX_REQUEST="true")
    assert fragment.status_code == 200
    assert "overturned" in fragment.content.decode() and "no citation" in fragment.content.decode()
    plain = client.post(url, {"reviewer_met": "yes", "q_return": "run=1"})
    assert plain.status_code == 302 and plain.url.endswith("?run=1")
    assert list(CriterionReview.objects.filter(rollout=rollout).values_list("reviewer_met", flat=True)) == [
        T,
        F,
    ]
    bad = client.post(url, {"reviewer_met": "maybe"}, HTTP_HX_REQUEST="true")
    assert bad.status_code == 400 and CriterionReview.objects.count() == 2


def test_an_expert_reads_the_verdicts_without_the_review_buttons(client, world, expert):
    rollout = world["rollouts"]["q0"]
    client.force_login(expert)
    page = client.get(reverse("runs:trace_detail", args=[rollout.pk])).content.decode()
    assert "Rubric and verdicts" in page
    assert reverse("runs:trace_criterion_review", args=[rollout.pk, "c1"]) not in page
    response = client.post(
        reverse("runs:trace_criterion_review", args=[rollout.pk, "c1"]), {"reviewer_met": "yes"}
    )
    assert response.status_code == 403


def test_with_no_review_the_page_says_so_and_how_to_add_one(client, world, reviewer):
    client.force_login(reviewer)
    page = client.get(reverse("runs:grader_health")).content.decode()

    assert "No reviews yet" in page
    assert "under <strong>Rubric and verdicts</strong> give your verdict on each criterion" in page
    assert f'href="{reverse("runs:trace_list")}"' in page
    # No figures without reviews: no kappa legend, no empty tables.
    assert "1 perfect" not in page and "Cohen's κ" not in page and "Per criterion kind" not in page


def test_with_no_review_of_a_run_the_link_lists_that_runs_traces(client, world, reviewer):
    run = world["rollouts"]["q0"].run
    client.force_login(reviewer)
    page = client.get(reverse("runs:grader_health") + f"?run={run.pk}").content.decode()

    assert "on this run's rollouts" in page
    assert f'href="{reverse("runs:trace_list")}?run={run.pk}"' in page


def test_a_kappa_that_is_undefined_says_why_on_its_card(client, world, reviewer):
    criterion_review_set(rollout=world["rollouts"]["z"], user=reviewer, criterion_id="c2", reviewer_met=T)
    client.force_login(reviewer)
    page = client.get(reverse("runs:grader_health")).content.decode()

    assert "undefined: one verdict throughout" in page and "1 perfect" not in page
