import pytest
from django.urls import reverse

from tests.runs.validation_helpers import validation_finished
from tests.tasks_authoring.web_helpers import in_review_task

pytestmark = pytest.mark.django_db


def test_the_queue_lists_versions_in_review_with_their_counts(client, expert, reviewer):
    task = in_review_task(expert, criteria=2)
    client.force_login(reviewer)
    response = client.get(reverse("tasks_authoring:review_queue"))
    [version] = response.context["versions"]
    assert (version.task, version.criteria_count, version.file_count) == (task, 2, 1)


def test_an_empty_queue_says_so(client, reviewer):
    client.force_login(reviewer)
    assert "Nothing waits for review" in client.get(reverse("tasks_authoring:review_queue")).content.decode()


def test_a_reviewer_approves(client, expert, reviewer):
    task = in_review_task(expert)
    validation_finished(task.latest_version)
    client.force_login(reviewer)
    response = client.post(
        reverse("tasks_authoring:review_decide", args=[task.pk]), {"decision": "approve"}, follow=True
    )
    task.refresh_from_db()
    assert task.status == "approved"
    assert "Approved version 1." in response.content.decode()


def test_requesting_changes_needs_a_comment(client, expert, reviewer):
    task = in_review_task(expert)
    client.force_login(reviewer)
    response = client.post(
        reverse("tasks_authoring:review_decide", args=[task.pk]), {"decision": "request_changes"}, follow=True
    )
    task.refresh_from_db()
    assert task.status == "in_review"
    assert "Say what should change" in response.content.decode()


def test_a_comment_tied_to_a_criterion_goes_back_to_the_page_it_came_from(client, expert, reviewer):
    task = in_review_task(expert)
    criterion = task.latest_version.criteria.get()
    client.force_login(reviewer)
    back = reverse("tasks_authoring:task_detail", args=[task.pk]) + "?v=1"
    response = client.post(
        reverse("tasks_authoring:review_decide", args=[task.pk]),
        {"decision": "comment", "comment": "Which currency?", "criterion": criterion.pk, "next": back},
    )
    assert response["Location"] == back
    assert criterion.reviews.get().comment == "Which currency?"


def test_an_outside_next_url_is_ignored(client, expert, reviewer):
    task = in_review_task(expert)
    client.force_login(reviewer)
    response = client.post(
        reverse("tasks_authoring:review_decide", args=[task.pk]),
        {"decision": "comment", "comment": "ok", "next": "https://evil.example/"},
    )
    assert response["Location"] == reverse("tasks_authoring:task_detail", args=[task.pk])


def test_a_reviewer_cannot_approve_their_own_task(client, make_user):
    both = make_user("bea_both", "expert", "reviewer")
    task = in_review_task(both)
    client.force_login(both)
    response = client.post(
        reverse("tasks_authoring:review_decide", args=[task.pk]), {"decision": "approve"}, follow=True
    )
    task.refresh_from_db()
    assert task.status == "in_review"
    assert "Not recorded: " in response.content.decode()
