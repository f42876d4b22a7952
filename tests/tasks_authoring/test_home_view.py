import pytest
from django.urls import reverse

from tasks_authoring import services
from tests.tasks_authoring.web_helpers import draft_task, in_review_task

pytestmark = pytest.mark.django_db


def test_the_expert_sees_drafts_and_versions_sent_back(client, expert, reviewer):
    draft_task(expert, title="Still writing")
    sent_back = in_review_task(expert, title="Needs work")
    services.review_decide(
        version=sent_back.latest_version, reviewer=reviewer, decision="request_changes", comment="Vague"
    )
    client.force_login(expert)
    response = client.get(reverse("home"))
    assert [t.title for t in response.context["drafts"]] == ["Still writing"]
    assert [t.title for t in response.context["sent_back"]] == ["Needs work"]
    assert "Sent back for changes" in response.content.decode()


def test_the_reviewer_sees_the_reviews_waiting(client, expert, reviewer):
    in_review_task(expert, title="Please look")
    client.force_login(reviewer)
    response = client.get(reverse("home"))
    assert [v.task.title for v in response.context["reviews_waiting"]] == ["Please look"]


def test_the_nav_shows_each_role_its_entries(client, expert, reviewer, researcher):
    def labels(user):
        client.force_login(user)
        return [item["label"] for item in client.get(reverse("home")).context["nav_items"]]

    assert labels(expert) == ["Home", "Tasks", "Runs", "Traces"]
    assert labels(reviewer) == ["Home", "Tasks", "Review queue", "Task sets", "Runs", "Traces", "Quality"]
    assert labels(researcher) == ["Home", "Tasks", "Task sets", "Runs", "Traces", "Quality"]


def test_the_researcher_sees_their_runs_going_and_ended(client, expert, reviewer, researcher):
    from tests.runs.factories import build_two_task_set, make_run

    task_set = build_two_task_set(expert, reviewer, researcher)
    make_run(user=researcher, task_set=task_set, kind="train", status="running", name="Live GRPO")
    make_run(user=researcher, task_set=task_set, kind="eval", status="succeeded", name="Baseline eval")
    client.force_login(researcher)
    response = client.get(reverse("home"))
    runs = response.context["home_runs"]
    assert [r.name for r in runs["active"]] == ["Live GRPO"] and [r.name for r in runs["ended"]] == [
        "Baseline eval"
    ]
    assert 'role="progressbar"' in response.content.decode()


def test_the_reviewer_sees_flagged_traces_and_unlabelled_harness_errors(client, expert, reviewer, researcher):
    from runs.services.labels import rollout_label_set
    from tests.runs.factories import add_rollout, build_two_task_set, make_run

    task_set = build_two_task_set(expert, reviewer, researcher)
    run = make_run(user=researcher, task_set=task_set, kind="eval", status="succeeded")
    version = task_set.members.first().version
    hacked = add_rollout(run, version, split="eval", step=0)
    add_rollout(
        run,
        version,
        split="eval",
        step=0,
        sample=1,
        outcome="harness_error",
        passed=None,
        code="TOOL_TIMEOUT",
    )
    rollout_label_set(rollout=hacked, user=reviewer, label="reward_hacking", note="copied the golden file")
    client.force_login(reviewer)
    response = client.get(reverse("home"))
    flags = response.context["flags"]
    assert [r.pk for r in flags["flagged"]] == [hacked.pk] and flags["unlabelled_harness_errors"] == 1
    assert "1 harness error nobody has labelled" in response.content.decode()
