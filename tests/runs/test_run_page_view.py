"""The run page: header, live partial (polled, 286 when the run ended), charts, per-task table, harness panel."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from tests.runs.factories import add_checkpoint, add_event, add_log, add_rollout, add_steps, make_run

pytestmark = pytest.mark.django_db


def _versions(task_set):
    return [member.version for member in task_set.members.select_related("version__task").order_by("split")]


@pytest.fixture
def train_run(researcher, two_task_set):
    run = make_run(user=researcher, task_set=two_task_set, kind="train", status="running", name="Toy GRPO")
    add_steps(run, 8, eval_every=4)
    first, second = _versions(two_task_set)
    for step in (1, 8):
        add_rollout(run, first, step=step, passed=step == 8)
        add_rollout(run, second, step=step, passed=True)
    add_rollout(run, first, step=2, outcome="harness_error", passed=None, code="TOOL_TIMEOUT", final=False)
    add_rollout(run, first, step=2, outcome="harness_error", passed=None, code="TOOL_TIMEOUT", attempt=2)
    add_log(run, 1, "evaluation at step 4")
    add_checkpoint(run, 4)
    return run


def _charts(response) -> dict:
    html = response.content.decode()
    start = html.index('<script id="run-charts" type="application/json">') + len(
        '<script id="run-charts" type="application/json">'
    )
    return json.loads(html[start : html.index("</script>", start)])


def test_it_shows_the_run_with_its_charts_tables_and_spec(client, researcher, train_run):
    client.force_login(researcher)
    response = client.get(reverse("runs:run_detail", args=[train_run.pk]))
    assert response.status_code == 200
    page = response.content.decode()
    assert "Toy GRPO" in page and "Cancel run" in page
    assert 'hx-trigger="every 3s"' in page
    charts = {chart["id"]: chart for chart in _charts(response)["charts"]}
    assert charts["reward"]["x"] == list(range(1, 9))
    assert charts["reward"]["series"][0]["values"][-1] == 1.0
    assert {"pass", "harness", "loss", "entropy", "clip", "grad_norm", "time", "eval_pass"} <= set(charts)
    assert [s["label"] for s in charts["eval_pass"]["series"]] == ["Pass@1", "Pass@2"]
    assert [s["label"] for s in charts["harness"]["series"]] == ["all codes", "TOOL_TIMEOUT"]
    tools = {s["label"]: s["values"] for s in charts["tools"]["series"]}
    assert tools["read_pdf"][:2] == [0.75, 1.0]  # 1 error in 4 calls at odd steps, none at even
    assert tools["submit_answer"] == [1.0] * 8
    assert charts["harness"]["series"][1]["values"][1] == 1 / 8  # one of the step's 2×4 rollouts
    assert "KL to the reference" in page  # named as not reported: kl was None at every step
    assert "kl" not in charts
    assert "evaluation at step 4" in page
    assert "step-4" in page
    assert "&quot;max_steps&quot;: 10" in page  # the spec, pretty-printed


def test_the_per_task_table_counts_final_rollouts_and_never_averages_a_harness_error(
    client, researcher, train_run
):
    client.force_login(researcher)
    response = client.get(reverse("runs:run_detail", args=[train_run.pk]))
    rows = {row["task_name"]: row for row in response.context["tasks"]}
    first = next(row for row in rows.values() if row["harness_errors"])
    assert first["rollouts"] == 3  # 2 graded + the final harness attempt, not the retried one
    assert first["valid"] == 2
    assert first["mean_reward"] == 0.5
    assert first["pass_rate"] == 0.5
    assert first["trend"] == 1.0  # 0 at step 1 → 1 at step 8
    harness = response.context["harness"]["codes"]
    assert [(c["error_code"], c["count"], c["final_count"]) for c in harness] == [("TOOL_TIMEOUT", 2, 1)]
    assert len(harness[0]["examples"]) == 2


def test_the_task_table_sorts_on_the_server(client, researcher, train_run):
    client.force_login(researcher)
    response = client.get(reverse("runs:run_detail", args=[train_run.pk]), {"tsort": "-errors"})
    assert [row["harness_errors"] for row in response.context["tasks"]] == [1, 0]
    response = client.get(reverse("runs:run_detail", args=[train_run.pk]), {"tsort": "errors"})
    assert [row["harness_errors"] for row in response.context["tasks"]] == [0, 1]


def test_the_live_partial_polls_while_running_and_answers_286_once_the_run_ended(
    client, researcher, train_run
):
    client.force_login(researcher)
    url = reverse("runs:run_detail", args=[train_run.pk])
    response = client.get(url, headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert response.content.decode().lstrip().startswith('<div id="run-live"')
    assert "Task versions" not in response.content.decode()  # the static parts are not re-sent
    train_run.status = "succeeded"
    train_run.save(update_fields=["status"])
    response = client.get(url, headers={"HX-Request": "true"})
    assert response.status_code == 286
    assert "every 3s" not in response.content.decode()


def test_an_eval_run_shows_its_figures_and_pass_at_k_from_the_rollouts(
    client, reviewer, researcher, two_task_set
):
    run = make_run(
        user=researcher, task_set=two_task_set, kind="eval", status="succeeded", name="Oracle eval"
    )
    first, second = _versions(two_task_set)
    add_rollout(run, first, split="eval", step=0, passed=True)
    add_rollout(run, second, split="eval", step=0, passed=False)
    add_rollout(
        run, second, split="eval", step=0, sample=1, outcome="harness_error", passed=None, code="JUDGE"
    )
    client.force_login(reviewer)
    response = client.get(reverse("runs:run_detail", args=[run.pk]))
    totals = response.context["totals"]
    assert totals["mean_reward"] == 0.5 and totals["pass_at_1"] == 0.5
    assert totals["harness_error_rate"] == pytest.approx(1 / 3)
    assert response.context["charts"]["charts"] == []  # one step: nothing to draw over steps
    assert "Cancel run" not in response.content.decode()
    assert "JUDGE" in response.content.decode()


def test_a_queued_run_says_it_is_waiting_for_a_worker(client, researcher, two_task_set):
    run = make_run(user=researcher, task_set=two_task_set, kind="eval", status="queued")
    client.force_login(researcher)
    page = client.get(reverse("runs:run_detail", args=[run.pk])).content.decode()
    assert "The run is queued" in page and "Cancel run" in page


def test_the_old_rollout_address_opens_the_trace_viewer_within_the_run(
    client, researcher, train_run, two_task_set
):
    rollout = add_rollout(train_run, _versions(two_task_set)[0], step=3)
    client.force_login(researcher)
    response = client.get(reverse("runs:rollout_detail", args=[train_run.pk, rollout.pk]))
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('runs:trace_detail', args=[rollout.pk])}?run={train_run.pk}"


def test_a_rollout_of_another_run_is_not_found(client, researcher, train_run, two_task_set):
    other = make_run(user=researcher, task_set=two_task_set, kind="eval", status="succeeded")
    rollout = add_rollout(other, _versions(two_task_set)[0], split="eval", step=0)
    client.force_login(researcher)
    assert client.get(reverse("runs:rollout_detail", args=[train_run.pk, rollout.pk])).status_code == 404


def test_cancelling_a_queued_run_is_immediate(client, researcher, two_task_set):
    run = make_run(user=researcher, task_set=two_task_set, kind="eval", status="queued")
    client.force_login(researcher)
    response = client.post(reverse("runs:run_cancel", args=[run.pk]), follow=True)
    run.refresh_from_db()
    assert run.status == "cancelled"
    assert "Cancelled before it started" in response.content.decode()


def test_cancelling_an_ended_run_says_why_not(client, researcher, two_task_set):
    run = make_run(user=researcher, task_set=two_task_set, kind="eval", status="succeeded")
    client.force_login(researcher)
    response = client.post(reverse("runs:run_cancel", args=[run.pk]), follow=True)
    assert "Not cancelled: the run already ended" in response.content.decode()


def test_a_reviewer_may_read_but_not_cancel(client, reviewer, researcher, two_task_set):
    run = make_run(user=researcher, task_set=two_task_set, kind="eval", status="running")
    client.force_login(reviewer)
    assert "Cancel run" not in client.get(reverse("runs:run_detail", args=[run.pk])).content.decode()
    assert client.post(reverse("runs:run_cancel", args=[run.pk])).status_code == 403


def test_the_experts_task_page_shows_how_each_run_did_on_it(
    client, expert, researcher, make_user, two_task_set
):
    version = _versions(two_task_set)[0]
    run = make_run(
        user=researcher, task_set=two_task_set, kind="eval", status="succeeded", name="Oracle eval"
    )
    add_rollout(run, version, split="eval", step=0, passed=True)
    add_rollout(run, version, split="eval", step=0, sample=1, passed=False)
    add_rollout(run, _versions(two_task_set)[1], split="eval", step=0, passed=False)  # another task
    client.force_login(expert)
    response = client.get(reverse("tasks_authoring:task_detail", args=[version.task_id]))
    [result] = response.context["run_results"]
    assert result["run"] == run and result["versions"] == [version.number]
    assert (result["rollouts"], result["pass_rate"], result["mean_reward"]) == (2, 0.5, 0.5)
    assert "Oracle eval" in response.content.decode()
    client.force_login(make_user("rob_researcher", "researcher"))  # may open the task, not the run
    response = client.get(reverse("tasks_authoring:task_detail", args=[version.task_id]))
    assert response.context["run_results"] == []


def test_a_live_runs_task_table_is_reused_briefly_and_an_ended_runs_follows_its_rollouts(
    researcher, two_task_set
):
    from runs.selectors import run_task_results_recent

    version = _versions(two_task_set)[0]
    run = make_run(user=researcher, task_set=two_task_set, kind="eval", status="running")
    add_rollout(run, version, split="eval", step=0)
    rows, _ = run_task_results_recent(run=run, max_age=15)
    add_rollout(run, version, split="eval", step=0, sample=1)
    run.rollouts_done = 2
    assert run_task_results_recent(run=run, max_age=15)[0] == rows  # still fresh enough
    assert run_task_results_recent(run=run, max_age=0)[0][0]["rollouts"] == 2
    run.status, run.rollouts_done = "succeeded", 3
    add_rollout(run, version, split="eval", step=0, sample=2)
    assert run_task_results_recent(run=run, max_age=0)[0][0]["rollouts"] == 3


def test_the_harness_panel_lists_only_bundles_that_failed_to_load_beside_the_codes(
    client, researcher, train_run
):
    """A rollout's harness_error event is already counted under its code; only a bundle that never
    loaded (no sample, no rollout) gets its own row."""
    add_event(
        train_run,
        50,
        "harness_error",
        {"code": "TOOL_TIMEOUT", "task": "tasks/train/a", "message": "slow", "step": 2, "sample": 0},
    )
    add_event(
        train_run,
        51,
        "harness_error",
        {"code": "BUNDLE_INVALID", "task": "tasks/train/broken", "message": "task.toml is missing"},
    )
    client.force_login(researcher)
    response = client.get(reverse("runs:run_detail", args=[train_run.pk]))
    harness = response.context["harness"]
    assert [failure["code"] for failure in harness["bundle_failures"]] == ["BUNDLE_INVALID"]
    assert "task.toml is missing" in response.content.decode()
