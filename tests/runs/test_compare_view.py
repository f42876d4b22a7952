"""Compare: 2–8 runs, overlaid curves, a pinned baseline, the per-task diff and the spec fields that differ."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.runs.factories import TRAIN_SPEC, add_rollout, add_steps, make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def pair(researcher, two_task_set):
    versions = [m.version for m in two_task_set.members.select_related("version__task").order_by("split")]
    base = make_run(user=researcher, task_set=two_task_set, kind="train", status="succeeded", name="Base")
    tuned = make_run(
        user=researcher,
        task_set=two_task_set,
        kind="train",
        status="succeeded",
        name="Higher lr",
        spec={**TRAIN_SPEC, "optimizer": {"lr": 1e-3}},
    )
    add_steps(base, 4)
    add_steps(tuned, 6)
    add_rollout(base, versions[0], passed=False)
    add_rollout(base, versions[1], passed=True)
    add_rollout(tuned, versions[0], passed=True)  # improved
    add_rollout(tuned, versions[1], passed=False)  # regressed
    return base, tuned


def test_it_overlays_the_curves_of_the_runs(client, researcher, pair):
    base, tuned = pair
    client.force_login(researcher)
    response = client.get(reverse("runs:run_compare"), {"runs": f"{base.pk},{tuned.pk}"})
    assert response.status_code == 200
    charts = {chart["id"]: chart for chart in response.context["charts"]["charts"]}
    reward = charts["reward"]
    assert reward["x"] == [1, 2, 3, 4, 5, 6]
    assert [series["label"] for series in reward["series"]] == [f"#{base.pk} Base", f"#{tuned.pk} Higher lr"]
    assert reward["series"][0]["values"][4] is None  # the base run has no step 5


def test_the_task_diff_names_improvements_and_regressions_against_the_baseline(client, researcher, pair):
    base, tuned = pair
    client.force_login(researcher)
    response = client.get(reverse("runs:run_compare"), {"runs": [base.pk, tuned.pk]})
    changes = {row["task_name"]: row["cells"][1]["change"] for row in response.context["task_rows"]}
    assert sorted(changes.values()) == ["improved", "regressed"]
    assert response.context["task_rows"][0]["cells"][1]["change"] == "regressed"  # regressions first
    counts = dict(response.context["counts"])
    assert counts[tuned] == {"improved": 1, "regressed": 1, "same": 0, "missing": 0}
    only = client.get(reverse("runs:run_compare"), {"runs": f"{base.pk},{tuned.pk}", "show": "improved"})
    assert [row["cells"][1]["change"] for row in only.context["task_rows"]] == ["improved"]


def test_a_pinned_baseline_flips_the_diff(client, researcher, pair):
    base, tuned = pair
    client.force_login(researcher)
    response = client.get(
        reverse("runs:run_compare"), {"runs": f"{base.pk},{tuned.pk}", "baseline": tuned.pk}
    )
    assert response.context["baseline"] == tuned
    counts = dict(response.context["counts"])
    assert counts[base] == {"improved": 1, "regressed": 1, "same": 0, "missing": 0}


def test_the_spec_diff_shows_only_what_differs(client, researcher, pair):
    base, tuned = pair
    client.force_login(researcher)
    response = client.get(reverse("runs:run_compare"), {"runs": f"{base.pk},{tuned.pk}"})
    assert response.context["spec_rows"] == [{"key": "optimizer.lr", "values": ["0.0001", "0.001"]}]


@pytest.mark.parametrize("ids", ["", "1", ",".join(str(i) for i in range(1, 10))])
def test_it_asks_for_two_to_eight_runs(client, researcher, ids):
    client.force_login(researcher)
    response = client.get(reverse("runs:run_compare"), {"runs": ids})
    assert response.status_code == 400
    assert "Pick 2 to 8 runs" in response.content.decode()


def test_a_run_the_user_may_not_read_is_not_found(client, researcher, make_user, pair, two_task_set):
    other = make_run(user=make_user("rob_researcher", "researcher"), task_set=two_task_set, kind="eval")
    client.force_login(researcher)
    response = client.get(reverse("runs:run_compare"), {"runs": f"{pair[0].pk},{other.pk}"})
    assert response.status_code == 404
