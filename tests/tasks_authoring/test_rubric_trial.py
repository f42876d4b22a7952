"""The try-it service: a candidate answer graded by the real grader, loose criteria flagged, the judge
reached over HTTP (a real judge server process with a tiny random model) or reported unavailable."""

from __future__ import annotations

import pytest

from rl_engine.models import builtin_model
from runs.models import RolloutBody
from tasks_authoring import services
from tasks_authoring.errors import AuthoringError, NotAllowed
from tasks_authoring.models import TaskSet, TaskSetMember
from tasks_authoring.services.rubric_trial import (
    rubric_trial_rollout_answer,
    rubric_trial_rollouts,
    rubric_try,
)
from tests.rl_engine.fake_judge import FakeJudge, verdict_reply
from tests.rl_engine.test_judge_server import judge_process
from tests.runs.factories import add_rollout, make_run
from tests.tasks_authoring.web_helpers import draft_task, in_review_task, workbook_bytes
from webapp.testing.services import free_port

pytestmark = pytest.mark.django_db


def _criterion(task, text, kind, params=None, required=False):
    return services.criterion_create(
        version=task.latest_version,
        user=task.owner,
        text=text,
        kind=kind,
        params=params or {},
        weight=1.0,
        required=required,
    )


def _by_key(result):
    return {c.key: c for c in result.criteria}


@pytest.fixture(scope="module")
def tiny_judge(tmp_path_factory):
    folder = builtin_model("tiny-llama", cache_dir=tmp_path_factory.mktemp("models"))
    with judge_process(str(folder), tmp_path_factory.mktemp("judge") / "server.log", env={}) as served:
        yield served


def test_it_grades_the_golden_answer_against_every_criterion(expert):
    task = draft_task(expert, criteria=2)  # c1 "fact 1" (required), c2 "fact 2"
    _criterion(task, "States the growth", "number_close", {"value": 12.5})

    result = rubric_try(version=task.latest_version, user=expert, answer="fact 1, fact 2: growth was 12.5%")

    verdicts = _by_key(result)
    assert [(k, v.met) for k, v in verdicts.items()] == [("c1", True), ("c2", True), ("c3", True)]
    assert "contains 'fact 1'" in verdicts["c1"].rationale
    assert (result.score, result.passed, result.loose_count) == (1.0, True, 0)


def test_a_partial_answer_scores_the_weighted_share_and_fails_a_required_criterion(expert):
    task = draft_task(expert, criteria=2)

    result = rubric_try(version=task.latest_version, user=expert, answer="only fact 2 here")

    assert [c.met for c in result.criteria] == [False, True]
    assert (result.score, result.passed) == (0.5, False)


def test_it_flags_a_criterion_that_an_empty_answer_meets(expert):
    task = draft_task(expert)
    _criterion(task, "Says anything at all", "regex", {"pattern": ".*"})

    result = rubric_try(version=task.latest_version, user=expert, answer="fact 1")

    tight, loose = result.criteria
    assert tight.loose == []
    assert [probe.probe for probe in loose.loose] == ["empty", "off-topic"]
    assert loose.loose[0].rationale.startswith("the pattern matched")
    assert result.loose_count == 1


def test_it_flags_a_criterion_that_an_off_topic_answer_meets(expert):
    task = draft_task(expert)
    _criterion(task, "Uses the word 'the'", "contains", {"value": "the"})

    result = rubric_try(version=task.latest_version, user=expert, answer="the fact 1")

    assert [probe.probe for probe in _by_key(result)["c2"].loose] == ["off-topic"]


def test_output_files_reach_the_file_criteria(expert):
    task = draft_task(expert)
    _criterion(task, "Writes the model", "file_exists", {"path": "output/model.xlsx"})
    _criterion(
        task, "B2 holds 2023 APAC", "xlsx_cell_equals", {"path": "model.xlsx", "cell": "B2", "value": 100}
    )

    result = rubric_try(
        version=task.latest_version,
        user=expert,
        answer="fact 1",
        output_files={"model.xlsx": workbook_bytes()},
    )

    verdicts = _by_key(result)
    assert (verdicts["c2"].met, verdicts["c3"].met) == (True, True)
    # The probes have no files: a file criterion is never loose.
    assert verdicts["c2"].loose == verdicts["c3"].loose == []


def test_an_output_path_outside_output_is_refused(expert):
    task = draft_task(expert)
    with pytest.raises(AuthoringError, match="under output/"):
        rubric_try(version=task.latest_version, user=expert, answer="x", output_files={"../escape.txt": "x"})


def test_a_python_criterion_runs_over_the_world_files(expert):
    task = draft_task(expert)  # world: notes/readme.txt "Revenue grew in APAC."
    _criterion(
        task,
        "Quotes the notes",
        "python",
        {"expression": "open('notes/readme.txt').read().strip() in answer"},
    )
    _criterion(task, "Raises", "python", {"expression": "1 / 0"})

    result = rubric_try(version=task.latest_version, user=expert, answer="fact 1: Revenue grew in APAC.")

    verdicts = _by_key(result)
    assert verdicts["c2"].met is True and verdicts["c2"].loose == []
    assert verdicts["c3"].met is False
    assert "ZeroDivisionError" in verdicts["c3"].rationale


def test_an_empty_rubric_is_refused_with_a_reason(expert):
    task = services.task_create(owner=expert, title="Empty", domain="finance", instruction="Q?")
    with pytest.raises(AuthoringError, match="no criteria yet"):
        rubric_try(version=task.latest_version, user=expert, answer="x")


def test_reviewers_may_try_a_task_in_review_but_researchers_may_not(expert, reviewer, researcher):
    task = in_review_task(expert)
    assert rubric_try(version=task.latest_version, user=reviewer, answer="fact 1").passed is True
    with pytest.raises(NotAllowed):
        rubric_try(version=task.latest_version, user=researcher, answer="fact 1")


def test_a_dead_judge_is_reported_per_criterion_never_as_not_met(expert, settings):
    settings.PRACTICUM_JUDGE_URL = f"http://127.0.0.1:{free_port()}/v1"
    task = draft_task(expert)
    _criterion(task, "Says the target is not met", "llm_judge")

    result = rubric_try(version=task.latest_version, user=expert, answer="fact 1")

    deterministic, judged = result.criteria
    assert deterministic.met is True
    assert judged.met is None
    assert judged.rationale.startswith("judge unavailable: judge at http://127.0.0.1:")
    assert "request failed" in judged.rationale
    # The empty probe needs no judge: an empty answer meets no llm_judge criterion (the harness rule).
    assert judged.unprobed == ["off-topic"] and judged.loose == []
    assert (result.score, result.passed, result.missing) == (None, None, ["c2"])


def test_a_judge_that_says_yes_to_anything_is_flagged_by_the_off_topic_answer(expert, settings):
    task = draft_task(expert)
    _criterion(task, "Says the target is not met", "llm_judge")

    with FakeJudge(("ok", verdict_reply(True, "Yes, it holds"))) as judge:
        settings.PRACTICUM_JUDGE_URL = judge.base_url
        result = rubric_try(version=task.latest_version, user=expert, answer="fact 1: the target was missed")

    judged = _by_key(result)["c2"]
    assert judged.met is True
    assert [(probe.probe, probe.rationale) for probe in judged.loose] == [("off-topic", "Yes, it holds")]
    assert judged.unprobed == []
    # Only the candidate and the off-topic paragraph reached the judge; the empty probe did not.
    prompts = [request["body"]["messages"][-1]["content"] for request in judge.requests]
    assert len(prompts) == 2 and all("<final_answer>\n\n</final_answer>" not in p for p in prompts)


def test_a_judge_that_never_answers_costs_only_the_bounded_time(expert, settings):
    import socket

    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        settings.PRACTICUM_JUDGE_URL = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        settings.RUBRIC_TRY_TIMEOUT_SECONDS = 1
        task = draft_task(expert)
        _criterion(task, "Says the target is not met", "llm_judge")

        result = rubric_try(version=task.latest_version, user=expert, answer="fact 1")

    assert result.criteria[0].met is True
    assert result.criteria[1].met is None
    assert result.criteria[1].rationale.startswith("judge unavailable: ")
    assert "1 s" in result.criteria[1].rationale


def test_llm_judge_criteria_are_judged_by_a_real_judge_server(expert, settings, tiny_judge):
    name, url = tiny_judge
    settings.PRACTICUM_JUDGE_URL = url
    settings.RUBRIC_TRY_TIMEOUT_SECONDS = 120
    task = draft_task(expert)
    _criterion(task, "Says the target is not met", "llm_judge", required=True)
    _criterion(task, "Names the region", "llm_judge", {"model": name})

    result = rubric_try(version=task.latest_version, user=expert, answer="fact 1: APAC missed its target.")

    for judged in result.criteria[1:]:
        assert isinstance(judged.met, bool)
        # A random model's verdict is not judged for correctness, only for coming from the server.
        assert "(local judge, P(yes) = " in judged.rationale
        assert judged.rationale.startswith("Yes") == judged.met
        for probe in judged.loose:
            assert probe.rationale.startswith("Yes")
    assert result.score is not None


def _run_with_rollout(researcher, version, *, answer, output_files=()):
    task_set = TaskSet.objects.create(name="set", owner=researcher, seed=1, eval_fraction=0.5)
    TaskSetMember.objects.create(task_set=task_set, version=version, split="eval")
    run = make_run(user=researcher, task_set=task_set, kind="eval", status="succeeded")
    rollout = add_rollout(run, version, split="eval")
    RolloutBody.objects.filter(rollout=rollout).update(final_answer=answer, output_files=list(output_files))
    return rollout


def test_rollout_answers_come_only_from_runs_the_user_may_read(expert, researcher, make_user):
    task = draft_task(expert)
    rollout = _run_with_rollout(
        researcher,
        task.latest_version,
        answer="fact 1 from a real rollout",
        output_files=[{"path": "a.md", "size_bytes": 2, "text": "hi"}, {"path": "b.xlsx", "size_bytes": 9}],
    )
    stranger = make_user("sam_stranger", "expert")
    foreign = draft_task(stranger, title="Someone else's")

    assert rubric_trial_rollouts(task=task, user=expert) == [rollout]  # the expert's task was in the run
    assert rubric_trial_rollouts(task=foreign, user=stranger) == []
    answer, files = rubric_trial_rollout_answer(task=task, user=expert, rollout_id=rollout.pk)
    assert (answer, files) == ("fact 1 from a real rollout", {"a.md": "hi"})
    with pytest.raises(type(rollout).DoesNotExist):
        rubric_trial_rollout_answer(task=foreign, user=stranger, rollout_id=rollout.pk)
