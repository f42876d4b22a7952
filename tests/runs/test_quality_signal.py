"""Signal and difficulty: zero-signal tasks of a run, counts per task set, a set without them, difficulty
bands from a reference run and the task-list filter, the run page's panel, and who may see what."""

from __future__ import annotations

import json
import re

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from runs import quality_selectors
from runs.models import TaskDifficulty
from runs.quality_selectors import difficulty_band, run_task_signal, runs_signal_counts, signal_summary
from runs.services.quality import task_difficulty_set_from_run, task_set_without_zero_signal
from tasks_authoring.services.task_sets import task_set_create
from tests.runs.factories import add_rollout, make_run
from tests.tasks_authoring.data_helpers import approve, draft_with_rubric

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(expert, reviewer, researcher, make_user):
    """Four tasks in one eval run: every sample passes, every one fails, mixed (2 of 3), only harness errors.
    "Zeta" belongs to another expert."""
    other = make_user("ezra_expert", "expert")
    owners = {"Always": expert, "Never": expert, "Sometimes": expert, "Zeta": other}
    versions = {
        title: approve(draft_with_rubric(owner, title=f"{title} question"), owner, reviewer)
        for title, owner in owners.items()
    }
    task_set = task_set_create(
        owner=researcher, name="Signal set", versions=list(versions.values()), eval_fraction=0.25, seed=3
    )
    run = make_run(user=researcher, task_set=task_set, kind="eval", status="succeeded", name="Baseline")
    for sample in range(3):
        add_rollout(run, versions["Always"], sample=sample, passed=True, split="eval")
        add_rollout(run, versions["Never"], sample=sample, passed=False, split="eval")
        add_rollout(run, versions["Sometimes"], sample=sample, passed=sample < 2, split="eval")
        add_rollout(run, versions["Zeta"], sample=sample, outcome="harness_error", code="TOOL_TIMEOUT")
    # A failed attempt that was retried does not count: only final attempts do.
    add_rollout(run, versions["Always"], sample=0, passed=False, final=False, split="eval")
    return {"versions": versions, "task_set": task_set, "run": run, "other_expert": other}


def _by_title(rows):
    return {row["version"].task.title.split()[0]: row for row in rows}


def test_it_flags_tasks_whose_every_valid_sample_passes_or_fails(world):
    rows = _by_title(run_task_signal(run=world["run"]))
    assert {title: row["signal"] for title, row in rows.items()} == {
        "Always": "all_pass",
        "Never": "all_fail",
        "Sometimes": "ok",
        "Zeta": "no_valid",
    }
    assert [title for title, row in rows.items() if row["zero_signal"]] == ["Always", "Never"]
    sometimes = rows["Sometimes"]
    assert sometimes["valid"] == 3 and sometimes["passed_count"] == 2
    assert sometimes["pass_rate"] == pytest.approx(2 / 3)
    assert sometimes["mean_score"] == pytest.approx(2 / 3)
    # Population variance of the rewards 1, 1, 0.
    assert sometimes["reward_variance"] == pytest.approx(2 / 9)
    assert rows["Always"]["reward_variance"] == pytest.approx(0)
    assert rows["Zeta"]["harness_errors"] == 3 and rows["Zeta"]["pass_rate"] is None


def test_it_counts_zero_signal_tasks_per_run_of_a_task_set(world, researcher):
    summary = signal_summary(run_task_signal(run=world["run"]))
    assert summary == {"tasks": 4, "zero_signal": 2, "all_pass": 1, "all_fail": 1, "no_valid": 1, "ok": 1}
    later = make_run(user=researcher, task_set=world["task_set"], kind="eval", status="succeeded")
    add_rollout(later, world["versions"]["Always"], passed=True)
    add_rollout(later, world["versions"]["Always"], sample=1, passed=False)
    counts = runs_signal_counts(runs=[world["run"], later], user=researcher)
    assert counts[world["run"].pk]["zero_signal"] == 2
    assert counts[later.pk] == {
        "tasks": 1,
        "zero_signal": 0,
        "all_pass": 0,
        "all_fail": 0,
        "no_valid": 0,
        "ok": 1,
    }


def test_the_signal_overview_lists_each_task_set_with_its_latest_runs_count(client, world, researcher):
    client.force_login(researcher)
    page = client.get(reverse("runs:signal")).content.decode()
    row = re.search(r"Signal set</a></td>.*?</tr>", page, re.S).group(0)
    assert "Baseline" in row
    assert re.findall(r'<td class="num[^"]*">(\d+)</td>', row) == ["3", "2", "1", "1"]


def test_the_set_page_shows_each_run_the_chosen_runs_table_and_pass_rates_per_model(
    client, world, researcher
):
    client.force_login(researcher)
    response = client.get(reverse("runs:signal"), {"task_set": world["task_set"].pk})
    page = response.content.decode()
    assert response.context["run"] == world["run"]  # the latest run by default
    assert "zero: all pass" in page and "zero: all fail" in page and "no valid sample" in page
    models = response.context["models"]
    assert models["models"] == ["oracle"]  # the eval spec's agent
    cell = models["rows"][world["versions"]["Sometimes"].pk]["oracle"]
    assert cell["valid"] == 3 and cell["pass_rate"] == pytest.approx(2 / 3)


def test_a_task_set_without_the_zero_signal_tasks_keeps_the_rest_and_the_split_seed(world, researcher):
    new = task_set_without_zero_signal(run=world["run"], user=researcher, name="Signal set, trainable")
    titles = sorted(m.version.task.title for m in new.members.select_related("version__task"))
    assert titles == ["Sometimes question", "Zeta question"]  # no valid sample: kept, nothing known
    assert (new.seed, new.eval_fraction) == (world["task_set"].seed, world["task_set"].eval_fraction)
    assert "2 tasks" in new.description and f"run #{world['run'].pk}" in new.description


def test_the_run_page_action_makes_the_set_and_opens_it(client, world, researcher):
    client.force_login(researcher)
    url = reverse("runs:run_signal_task_set", args=[world["run"].pk])
    response = client.post(url, {"name": "Trainable"})
    assert response.status_code == 302
    new = world["task_set"].__class__.objects.get(name="Trainable")
    assert response.url == reverse("tasks_authoring:task_set_detail", args=[new.pk])
    assert new.members.count() == 2
    again = client.post(url, {"name": "Trainable"}, follow=True)
    assert "Not created" in again.content.decode() and "already exists" in again.content.decode()


@pytest.mark.parametrize(
    ("pass_rate", "band"),
    [
        (1.0, "too_easy"),
        (0.99, "easy"),
        (0.7, "easy"),
        (0.69, "medium"),
        (0.3, "medium"),
        (0.29, "hard"),
        (0.01, "hard"),
        (0.0, "too_hard"),
    ],
)
def test_difficulty_bands_have_documented_edges(pass_rate, band):
    assert difficulty_band(pass_rate) == band


def test_a_reference_run_sets_each_measured_tasks_band(world, researcher):
    result = task_difficulty_set_from_run(run=world["run"], user=researcher)
    assert (result.updated, result.skipped) == (3, 1)
    bands = {
        d.task.title.split()[0]: (d.band, d.samples) for d in TaskDifficulty.objects.select_related("task")
    }
    assert bands == {"Always": ("too_easy", 3), "Never": ("too_hard", 3), "Sometimes": ("medium", 3)}
    assert TaskDifficulty.objects.filter(reference_run=world["run"]).count() == 3


def test_only_researchers_set_the_reference(world, reviewer, client):
    with pytest.raises(PermissionDenied):
        task_difficulty_set_from_run(run=world["run"], user=reviewer)
    client.force_login(reviewer)
    response = client.post(reverse("runs:run_difficulty_reference", args=[world["run"].pk]))
    assert response.status_code == 403
    assert not TaskDifficulty.objects.exists()


def test_the_task_list_shows_and_filters_on_the_measured_band(client, world, researcher, expert):
    task_difficulty_set_from_run(run=world["run"], user=researcher)
    client.force_login(expert)
    url = reverse("tasks_authoring:task_list")
    easy = client.get(url, {"band": "too_easy"})
    assert [t.title for t in easy.context["page"].object_list] == ["Always question"]
    assert "Too easy (all pass)" in easy.content.decode()
    unmeasured = client.get(url, {"band": "unmeasured"})
    assert [t.title for t in unmeasured.context["page"].object_list] == ["Zeta question"]
    assert client.get(url, {"band": "bogus"}).context["filters"]["band"] == ""


def test_the_task_set_page_charts_the_band_distribution(client, world, researcher):
    task_difficulty_set_from_run(run=world["run"], user=researcher)
    client.force_login(researcher)
    page = client.get(
        reverse("tasks_authoring:task_set_detail", args=[world["task_set"].pk])
    ).content.decode()
    blob = json.loads(
        re.search(r'<script id="run-charts" type="application/json">(.*?)</script>', page).group(1)
    )
    chart = blob["charts"][0]
    assert chart["x_labels"] == ["Too easy", "Easy", "Medium", "Hard", "Too hard", "Not measured"]
    assert chart["series"][0]["values"] == [1, 0, 1, 0, 1, 1]
    assert 'data-chart="difficulty-bands"' in page


def test_the_run_panel_lists_the_zero_signal_tasks_with_the_actions(client, world, researcher):
    client.force_login(researcher)
    run = world["run"]
    assert (
        reverse("runs:run_signal", args=[run.pk])
        in client.get(reverse("runs:run_detail", args=[run.pk])).content.decode()
    )
    panel = client.get(reverse("runs:run_signal", args=[run.pk])).content.decode()
    assert "<strong>2</strong> of 4 tasks zero-signal" in panel
    assert "Always question</a> — all 3 pass" in panel and "Never question</a> — all 3 fail" in panel
    assert "Make a task set without them" in panel and "Use as difficulty reference" in panel


def test_an_expert_sees_only_their_own_tasks_and_no_actions(client, world, expert):
    client.force_login(expert)
    panel = client.get(reverse("runs:run_signal", args=[world["run"].pk]))
    titles = [row["version"].task.title for row in panel.context["signal_rows"]]
    assert titles == ["Always question", "Never question", "Sometimes question"]
    assert "Use as difficulty reference" not in panel.content.decode()
    other = world["other_expert"]
    client.force_login(other)
    rows = client.get(reverse("runs:run_signal", args=[world["run"].pk])).context["signal_rows"]
    assert [row["version"].task.title for row in rows] == ["Zeta question"]


@pytest.mark.parametrize("name", ["quality", "signal", "grader_health"])
def test_outsiders_get_404_on_the_quality_pages(client, world, outsider, name):
    client.force_login(outsider)
    assert client.get(reverse(f"runs:{name}")).status_code == 404
    assert client.get(reverse("runs:run_signal", args=[world["run"].pk])).status_code == 404


def test_another_researchers_run_is_404(client, world, make_user):
    client.force_login(make_user("rob_researcher", "researcher"))
    assert client.get(reverse("runs:run_signal", args=[world["run"].pk])).status_code == 404
    assert client.post(reverse("runs:run_difficulty_reference", args=[world["run"].pk])).status_code == 404
    assert client.get(reverse("runs:signal"), {"run": world["run"].pk}).status_code == 404


def test_the_model_of_a_run_comes_from_its_spec(world):
    run = world["run"]
    assert quality_selectors.run_model_name(run) == "oracle"
    run.spec = {"agent": "model", "model": {"path": "/models/qwen3-8b/"}}
    assert quality_selectors.run_model_name(run) == "qwen3-8b"
    run.spec = {"agent": "model", "model": {"builtin": "tiny-llama"}}
    assert quality_selectors.run_model_name(run) == "tiny-llama"
