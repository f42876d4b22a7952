import pytest
from django.urls import reverse

from tasks_authoring import services
from tasks_authoring.models import Task
from tests.tasks_authoring.web_helpers import approved_task, draft_task, in_review_task, upload

pytestmark = pytest.mark.django_db


def test_an_expert_creates_a_task_and_lands_in_the_editor(client, expert):
    client.force_login(expert)
    response = client.post(
        reverse("tasks_authoring:task_create"),
        {"title": "Covenant test", "domain": "law", "instruction": "Read it."},
    )
    task = Task.objects.get(title="Covenant test")
    assert response["Location"] == reverse("tasks_authoring:task_edit", args=[task.pk])
    assert (task.owner, task.domain.slug, task.latest_version.instruction) == (expert, "law", "Read it.")


def test_creating_without_a_title_shows_the_error_and_stores_nothing(client, expert):
    client.force_login(expert)
    response = client.post(reverse("tasks_authoring:task_create"), {"title": "", "domain": "law"})
    assert response.status_code == 200
    assert "This field is required" in response.content.decode()
    assert not Task.objects.exists()


def test_the_task_page_shows_instruction_rubric_files_and_history(client, expert):
    task = draft_task(expert, criteria=2)
    client.force_login(expert)
    html = client.get(reverse("tasks_authoring:task_detail", args=[task.pk])).content.decode()
    assert "<strong>adjusted</strong>" in html  # the instruction's markdown is rendered
    assert "States fact 2" in html and "notes/readme.txt" in html
    assert "Submit version 1 for review" in html


def test_the_instruction_markdown_is_sanitised(client, expert):
    task = services.task_create(
        owner=expert, title="XSS", domain="law", instruction="<script>alert(1)</script>ok"
    )
    client.force_login(expert)
    html = client.get(reverse("tasks_authoring:task_detail", args=[task.pk])).content.decode()
    assert "<script>alert(1)" not in html and "ok" in html


def test_submitting_a_complete_draft_puts_it_in_review(client, expert):
    task = draft_task(expert)
    client.force_login(expert)
    response = client.post(reverse("tasks_authoring:task_submit", args=[task.pk]), follow=True)
    task.refresh_from_db()
    assert task.status == "in_review"
    assert "waiting for a reviewer" in response.content.decode()


def test_submitting_an_incomplete_draft_names_what_is_missing(client, expert):
    task = services.task_create(owner=expert, title="Empty", domain="law")
    client.force_login(expert)
    response = client.post(reverse("tasks_authoring:task_submit", args=[task.pk]), follow=True)
    task.refresh_from_db()
    assert task.status == "draft"
    assert "Not submitted: " in response.content.decode()
    assert "instruction is empty" in response.content.decode()


def test_a_new_draft_from_an_approved_version_keeps_the_approved_one(client, expert, reviewer):
    task = approved_task(expert, reviewer)
    client.force_login(expert)
    response = client.post(reverse("tasks_authoring:task_new_draft", args=[task.pk]))
    assert response["Location"] == reverse("tasks_authoring:task_edit", args=[task.pk])
    assert list(task.versions.order_by("number").values_list("number", "state")) == [
        (1, "approved"),
        (2, "draft"),
    ]


def test_the_diff_shows_instruction_files_and_rubric_changes(client, expert, reviewer):
    task = approved_task(expert, reviewer)
    client.force_login(expert)
    client.post(reverse("tasks_authoring:task_new_draft", args=[task.pk]))
    draft = task.versions.get(number=2)
    services.task_version_update(version=draft, user=expert, instruction="Compute the APAC growth, adjusted.")
    upload(draft, expert, "data/extra.csv", b"a,b\n1,2\n")
    services.criterion_create(
        version=draft, user=expert, text="Says the target is missed", kind="llm_judge", params={}
    )
    response = client.get(reverse("tasks_authoring:version_diff", args=[task.pk]), {"from": 1, "to": 2})
    html = response.content.decode()
    assert response.context["diff"]["files"]["added"] == ["data/extra.csv"]
    assert "+Compute the APAC growth, adjusted." in html
    assert "-Compute the **adjusted** APAC growth." in html
    assert "Says the target is missed" in html


def test_the_agent_view_shows_the_instruction_and_files_but_not_the_rubric(client, expert):
    task = draft_task(expert)
    services.task_version_update(version=task.latest_version, user=expert, golden_answer="SECRET-ANSWER")
    client.force_login(expert)
    html = client.get(reverse("tasks_authoring:agent_view", args=[task.pk])).content.decode()
    assert "adjusted" in html and "readme.txt" in html and "notes/" in html
    assert "States fact 1" not in html and "SECRET-ANSWER" not in html


def test_a_reviewer_sees_request_changes_comments_in_place(client, expert, reviewer):
    task = in_review_task(expert)
    version = task.latest_version
    criterion = version.criteria.first()
    world_file = version.world_files.first()
    services.review_decide(
        version=version, reviewer=reviewer, decision="comment", comment="Too vague", criterion=criterion
    )
    services.review_decide(
        version=version,
        reviewer=reviewer,
        decision="comment",
        comment="Scan is blurry",
        world_file=world_file,
    )
    services.review_decide(
        version=version, reviewer=reviewer, decision="request_changes", comment="See notes"
    )
    client.force_login(expert)
    response = client.get(reverse("tasks_authoring:task_detail", args=[task.pk]))
    comments = response.context["comments"]
    assert [r.comment for r in comments["by_criterion"][criterion.pk]] == ["Too vague"]
    assert [r.comment for r in comments["by_file"][world_file.pk]] == ["Scan is blurry"]
    assert [r.comment for r in comments["general"]] == ["See notes"]
    assert "Open a new draft from version 1" in response.content.decode()
