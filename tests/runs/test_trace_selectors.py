"""The trace list's reads: every filter on its own and combined, text search, visibility, keyset pages, prev / next."""

from __future__ import annotations

import pytest

from runs.models import Rollout
from runs.trace_forms import RolloutFilterForm, filters_query
from runs.trace_selectors import (
    Cursor,
    rollout_neighbours,
    rollout_page,
    rollouts_filtered,
    rollouts_sorted,
)
from tests.runs.trace_helpers import ingest, make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(expert, researcher, reviewer, make_user):
    world = make_world(expert=expert, researcher=researcher, reviewer=reviewer, make_user=make_user)
    a, b = world.runs["a"], world.runs["b"]
    q0, q1, z = world.versions["q0"], world.versions["q1"], world.versions["z"]
    r = world.rollouts
    r["pass"] = ingest(a, q0, step=1, sample=0, split="eval", text="The revenue was 120 dollars")
    r["fail"] = ingest(a, q0, step=2, sample=1, split="eval", outcome="failed", text="I think revenue is 99")
    r["half"] = ingest(
        a, q1, step=3, sample=0, split="train", reward=0.5, score=0.5, passed=False, text="margin is thin"
    )
    r["timeout"] = ingest(
        a,
        q1,
        step=3,
        sample=1,
        outcome="harness_error",
        code="TOOL_TIMEOUT",
        message="read_pdf hung after 30 s",
    )
    r["budget"] = ingest(a, z, step=4, sample=0, outcome="agent_error", code="TURN_BUDGET", text="zeta zeta")
    r["other"] = ingest(b, q0, step=1, sample=0, text="Revenue in run B")
    r["other_z"] = ingest(b, z, step=1, sample=2, outcome="harness_error", code="SANDBOX_START")
    Rollout.objects.filter(pk=r["fail"].pk).update(label="grader_wrong")
    return world


def ids(rollouts) -> set[int]:
    return set(rollouts.values_list("pk", flat=True))


def keys(world, *names) -> set[int]:
    return {world.rollouts[name].pk for name in names}


def test_a_reviewer_reads_every_rollout(world):
    assert ids(rollouts_filtered(user=world.users["reviewer"], filters={})) == keys(world, *world.rollouts)


def test_a_researcher_reads_only_the_rollouts_of_their_runs(world):
    seen = ids(rollouts_filtered(user=world.users["researcher"], filters={}))
    assert seen == keys(world, "pass", "fail", "half", "timeout", "budget")


def test_an_expert_reads_only_their_own_tasks_rollouts_in_any_run(world):
    seen = ids(rollouts_filtered(user=world.users["expert"], filters={}))
    assert seen == keys(world, "pass", "fail", "half", "timeout", "other")
    other = ids(rollouts_filtered(user=world.users["other_expert"], filters={}))
    assert other == keys(world, "budget", "other_z")


def test_an_outsider_reads_nothing(world, outsider):
    assert not rollouts_filtered(user=outsider, filters={}).exists()


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"step_min": 2, "step_max": 3}, {"fail", "half", "timeout"}),
        ({"step_min": 4}, {"budget"}),
        ({"sample": 1}, {"fail", "timeout"}),
        ({"split": "train"}, {"half"}),
        ({"outcome": "harness_error"}, {"timeout"}),
        ({"error_code": "TURN_BUDGET"}, {"budget"}),
        ({"reward_min": 0.4, "reward_max": 0.6}, {"half"}),
        ({"reward_max": 0.0}, {"fail", "budget"}),
        ({"passed": True}, {"pass"}),
        ({"passed": False}, {"fail", "half"}),
        ({"final": True}, {"pass", "fail", "half", "timeout", "budget"}),
        ({"label": "grader_wrong"}, {"fail"}),
        ({"label": "any"}, {"fail"}),
        ({"label": "none"}, {"pass", "half", "timeout", "budget"}),
        ({"q": "REVENUE"}, {"pass", "fail"}),
        ({"q": "read_pdf hung"}, {"timeout"}),
        ({"outcome": "graded", "step_max": 1, "q": "revenue"}, {"pass"}),
        ({"split": "eval", "passed": False, "label": "grader_wrong", "sample": 1}, {"fail"}),
    ],
)
def test_each_filter_and_their_combinations_select_the_right_rollouts(world, filters, expected):
    filters = {"run": world.runs["a"].pk, **filters}
    assert ids(rollouts_filtered(user=world.users["reviewer"], filters=filters)) == keys(world, *expected)


def test_task_and_version_filters_cross_runs(world):
    reviewer = world.users["reviewer"]
    q0 = world.versions["q0"]
    assert ids(rollouts_filtered(user=reviewer, filters={"task": q0.task_id})) == keys(
        world, "pass", "fail", "other"
    )
    assert ids(rollouts_filtered(user=reviewer, filters={"version": world.versions["z"].pk})) == keys(
        world, "budget", "other_z"
    )


def test_a_retried_attempt_is_not_final(world):
    run = world.runs["a"]
    run.spec = {**run.spec, "max_attempts": 2}
    run.save(update_fields=["spec"])
    retried = ingest(run, world.versions["q1"], step=5, outcome="harness_error", code="INFERENCE", attempt=1)
    found = rollouts_filtered(user=world.users["reviewer"], filters={"run": run.pk, "final": False})
    assert ids(found) == {retried.pk}


def test_the_form_reads_types_and_clamps_the_url():
    form = RolloutFilterForm(
        {
            "run": "3",
            "step_min": "2",
            "step_max": "-1",
            "reward_min": "nan",
            "passed": "no",
            "outcome": "exploded",
            "label": "none",
            "q": "ab",
            "sort": "-reward",
            "after": "0.5~12",
        }
    )
    assert form.filters() == {"run": 3, "step_min": 2, "passed": False, "label": "none"}
    assert {"step_max", "reward_min", "outcome", "q"} <= set(form.errors)
    assert "at least 3 characters" in form.errors["q"][0]
    assert form.sort_key() == "-reward"
    assert form.cursor() == ("after", Cursor(0.5, 12))


def test_the_form_refuses_an_upside_down_range():
    form = RolloutFilterForm({"reward_min": "0.8", "reward_max": "0.2"})
    assert "reward_max" in form.errors
    assert "reward_max" not in form.filters()


def test_filters_round_trip_through_the_url():
    filters = {"run": 3, "passed": False, "label": "grader_wrong", "q": "revenue 120", "reward_min": 0.5}
    query = filters_query(filters, sort="reward")
    form = RolloutFilterForm(dict(pair.split("=") for pair in query.replace("+", " ").split("&")))
    assert form.filters() == filters
    assert form.sort_key() == "reward"


@pytest.mark.parametrize(
    "sort", ["-id", "id", "step", "-step", "-reward", "reward", "-turns", "-tokens", "-duration"]
)
def test_keyset_pages_walk_the_whole_list_both_ways_in_sort_order(world, sort):
    rollouts = rollouts_filtered(user=world.users["reviewer"], filters={})
    expected = list(rollouts_sorted(rollouts, sort).values_list("pk", flat=True))
    seen, pages, cursor = [], [], None
    while True:
        page = rollout_page(rollouts, sort=sort, cursor=cursor, size=2)
        pages.append(page)
        seen += [row.pk for row in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == expected
    assert pages[0].prev_cursor is None and pages[0].count == len(expected)
    back = []
    page = pages[-1]
    while page.prev_cursor is not None:
        page = rollout_page(rollouts, sort=sort, direction="before", cursor=page.prev_cursor, size=2)
        back = [row.pk for row in page.items] + back
    assert back + [row.pk for row in pages[-1].items] == expected


def test_reward_order_puts_missing_rewards_last(world):
    rollouts = rollouts_filtered(user=world.users["reviewer"], filters={"run": world.runs["a"].pk})
    rewards = [r.reward for r in rollouts_sorted(rollouts, "-reward")]
    assert rewards == [1.0, 0.5, 0.0, 0.0, None]


def test_prev_and_next_stay_inside_the_filter(world):
    rollouts = rollouts_filtered(user=world.users["reviewer"], filters={"q": "revenue"})
    order = list(rollouts_sorted(rollouts, "step").values_list("pk", flat=True))
    assert len(order) == 3
    first, middle, last = (Rollout.objects.get(pk=pk) for pk in order)
    assert rollout_neighbours(rollouts, sort="step", rollout=first) == (None, middle.pk)
    assert rollout_neighbours(rollouts, sort="step", rollout=middle) == (first.pk, last.pk)
    assert rollout_neighbours(rollouts, sort="step", rollout=last) == (middle.pk, None)


def test_a_malformed_cursor_starts_at_the_first_page():
    assert Cursor.parse("x~1") is None
    assert Cursor.parse("inf~1") is None
    assert Cursor.parse("1.5") is None
    assert Cursor.parse("n~7") == Cursor(None, 7)
    assert str(Cursor(0.25, 9)) == "0.25~9"


def test_the_search_text_holds_each_word_of_the_transcript_once():
    from runs.search_text import search_text_of, search_words

    text = search_text_of(
        turns=[
            {"role": "user", "content": "What was Q3 revenue? Revenue!"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "name": "read_pdf",
                        "arguments": {"path": "reports/Q3.pdf"},
                        "result_text": "Revenue 120",
                    }
                ],
            },
        ],
        final_answer="120",
        message="TOOL_TIMEOUT after 30 s",
        error_detail="Traceback: TimeoutError",
    )
    words = text.split()
    assert len(words) == len(set(words))
    for needle in ("q3", "revenue?", "read_pdf", "reports/q3.pdf", "120", "tool_timeout", "timeouterror"):
        assert needle in words
    assert search_words("  Revenue  PDF revenue ") == ["revenue", "pdf"]


def test_search_words_may_sit_anywhere_in_the_trace(world):
    found = rollouts_filtered(user=world.users["reviewer"], filters={"q": "thin margin"})
    assert ids(found) == keys(world, "half")
