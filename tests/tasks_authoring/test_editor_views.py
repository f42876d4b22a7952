import pytest
from django.urls import reverse

from tests.tasks_authoring.web_helpers import draft_task

pytestmark = pytest.mark.django_db


def _form(**changes) -> dict:
    data = {
        "title": "APAC growth check",
        "domain": "finance",
        "difficulty": "hard",
        "team": "",
        "instruction": "New **instruction**",
        "max_turns": "12",
        "max_tokens": "8000",
        "time_limit_sec": "300",
        "tools": ["read_pdf", "submit_answer"],
        "golden_answer": "12.5%",
        "solution_script": "print('12.5%')",
    }
    data.update(changes)
    return data


def test_saving_the_editor_stores_budgets_tools_and_answers(client, expert):
    task = draft_task(expert)
    client.force_login(expert)
    response = client.post(reverse("tasks_authoring:task_edit", args=[task.pk]), _form())
    assert response.status_code == 302
    version = task.latest_version
    assert (version.max_turns, version.max_tokens, version.time_limit_sec) == (12, 8000, 300)
    assert version.tools == ["read_pdf", "submit_answer"]
    assert (version.instruction, version.solution_script) == ("New **instruction**", "print('12.5%')")
    task.refresh_from_db()
    assert task.difficulty == "hard"


def test_every_tool_is_stored_as_none_so_later_tools_are_included(client, expert):
    task = draft_task(expert)
    client.force_login(expert)
    client.post(reverse("tasks_authoring:task_edit", args=[task.pk]), _form(all_tools="on"))
    assert task.latest_version.tools is None


def test_a_bad_budget_is_shown_next_to_its_field_and_nothing_is_saved(client, expert):
    task = draft_task(expert)
    client.force_login(expert)
    response = client.post(reverse("tasks_authoring:task_edit", args=[task.pk]), _form(max_turns="0"))
    assert response.status_code == 200
    assert response.context["form"].errors["max_turns"]
    assert task.latest_version.max_turns == 30


def test_the_editor_groups_the_tools_as_the_engine_does(client, expert):
    task = draft_task(expert)
    client.force_login(expert)
    response = client.get(reverse("tasks_authoring:task_edit", args=[task.pk]))
    groups = [group for group, _tools in response.context["tool_groups"]]
    assert groups == ["files", "pdf", "spreadsheets", "chat", "email", "actions"]


def test_the_preview_endpoint_renders_sanitised_markdown(client, expert):
    client.force_login(expert)
    response = client.post(
        reverse("tasks_authoring:markdown_preview"),
        {"instruction": "# Title\n\n<img src=x onerror=alert(1)> | a |\n|---|\n| 1 |"},
        headers={"HX-Request": "true"},
    )
    html = response.content.decode()
    assert '<div id="preview"' in html and "<h1>Title</h1>" in html
    assert "onerror" not in html


def test_an_approved_task_sends_the_editor_back_to_the_task_page(client, expert, reviewer):
    from tests.tasks_authoring.web_helpers import approved_task

    task = approved_task(expert, reviewer)
    client.force_login(expert)
    response = client.get(reverse("tasks_authoring:task_edit", args=[task.pk]), follow=True)
    assert response.redirect_chain[-1][0] == reverse("tasks_authoring:task_detail", args=[task.pk])
    assert "Open a new draft to change it" in response.content.decode()
