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

    assert labels(expert) == ["Home", "Tasks"]
    assert labels(reviewer) == ["Home", "Tasks", "Review queue", "Task sets"]
    assert labels(researcher) == ["Home", "Tasks", "Task sets"]
