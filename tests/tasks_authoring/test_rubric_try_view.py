"""The "Try the rubric" panel of the rubric editor: who may use it, and what each source grades."""

from __future__ import annotations

import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from runs.models import RolloutBody
from tasks_authoring import services
from tasks_authoring.models import Task, TaskSet, TaskSetMember, TaskVersion
from tests.runs.factories import add_rollout, make_run
from tests.tasks_authoring.web_helpers import draft_task, in_review_task, workbook_bytes

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true", "HX-Target": "rubric-trial"}


def _try(client, task, data, **kwargs):
    return client.post(reverse("tasks_authoring:rubric_try", args=[task.pk]), data, **kwargs)


def _verdicts(response) -> dict[str, str]:
    """Each result row's verdict as the panel shows it (htmx partials carry no test context)."""
    rows = re.findall(
        r'<tr data-key="(\w+)">.*?<span class="status \w+">([^<]+)</span>', response.content.decode(), re.S
    )
    return dict(rows)


def _rollout_of(task, researcher, answer: str):
    task_set = TaskSet.objects.create(name="eval set", owner=researcher, seed=1, eval_fraction=1.0)
    TaskSetMember.objects.create(task_set=task_set, version=task.latest_version, split="eval")
    run = make_run(user=researcher, task_set=task_set, kind="eval", status="succeeded", name="baseline eval")
    rollout = add_rollout(run, task.latest_version, split="eval", passed=False)
    RolloutBody.objects.filter(rollout=rollout).update(final_answer=answer)
    return rollout


def test_the_rubric_editor_shows_the_panel_to_the_tasks_editor(client, expert):
    task = draft_task(expert)
    client.force_login(expert)
    html = client.get(reverse("tasks_authoring:rubric", args=[task.pk])).content.decode()
    assert 'id="rubric-trial"' in html
    assert "Use the golden answer" in html
    assert "No rollout of this task in a run you can read yet" in html


def test_a_typed_answer_comes_back_as_the_panel_partial_with_each_verdict(client, expert):
    task = draft_task(expert, criteria=2)
    client.force_login(expert)

    response = _try(client, task, {"source": "typed", "answer": "fact 2 only"}, headers=HTMX)

    html = response.content.decode()
    assert html.lstrip().startswith('<section id="rubric-trial"')
    assert _verdicts(response) == {"c1": "not met", "c2": "met"}
    assert "Score 0.50 · not passed" in html
    assert "the answer does not contain &#x27;fact 1&#x27;" in html
    assert "fact 2 only</textarea>" in html


def test_the_golden_answer_button_grades_the_versions_golden_answer(client, expert):
    task = draft_task(expert)  # golden answer "12.5%"
    services.criterion_create(
        version=task.latest_version,
        user=expert,
        text="States 12.5%",
        kind="number_close",
        params={"value": 12.5},
    )
    client.force_login(expert)

    response = _try(client, task, {"source": "golden", "answer": "ignored"}, headers=HTMX)

    assert ">12.5%</textarea>" in response.content.decode()
    assert _verdicts(response) == {"c1": "not met", "c2": "met"}


def test_a_loose_criterion_is_flagged_with_why(client, expert):
    task = draft_task(expert)
    services.criterion_create(
        version=task.latest_version, user=expert, text="Anything", kind="regex", params={"pattern": "\\w*"}
    )
    client.force_login(expert)

    html = _try(client, task, {"answer": "fact 1"}, headers=HTMX).content.decode()

    assert "Too loose: an empty answer meets it (the pattern matched" in html
    assert "· 1 too loose ·" in html


def test_uploaded_output_files_are_graded(client, expert):
    task = draft_task(expert)
    services.criterion_create(
        version=task.latest_version,
        user=expert,
        text="B2 is 100",
        kind="xlsx_cell_equals",
        params={"path": "model.xlsx", "cell": "B2", "value": 100},
    )
    client.force_login(expert)

    response = _try(
        client,
        task,
        {"answer": "fact 1", "output_files": [SimpleUploadedFile("model.xlsx", workbook_bytes())]},
        headers=HTMX,
    )

    assert _verdicts(response) == {"c1": "met", "c2": "met"}
    assert "Graded with output/model.xlsx." in response.content.decode()


def test_a_rollout_answer_from_a_readable_run_is_graded(client, expert, researcher):
    task = draft_task(expert)
    rollout = _rollout_of(task, researcher, "the rollout said fact 1")
    client.force_login(expert)

    page = client.get(reverse("tasks_authoring:rubric", args=[task.pk])).content.decode()
    assert f'<option value="{rollout.pk}"' in page and "baseline eval · v1 · step 1" in page
    response = _try(client, task, {"source": "rollout", "rollout": rollout.pk}, headers=HTMX)

    assert ">the rollout said fact 1</textarea>" in response.content.decode()
    assert _verdicts(response) == {"c1": "met"}


def test_a_rollout_of_another_task_is_404(client, expert, researcher):
    task = draft_task(expert)
    other = draft_task(expert, title="Other")
    rollout = _rollout_of(other, researcher, "fact 1")
    client.force_login(expert)
    assert _try(client, task, {"source": "rollout", "rollout": rollout.pk}).status_code == 404
    assert _try(client, task, {"source": "rollout", "rollout": "abc"}).status_code == 404


def test_a_reviewer_may_try_a_task_in_review(client, expert, reviewer):
    task = in_review_task(expert)
    client.force_login(reviewer)
    assert (
        'id="rubric-trial"' in client.get(reverse("tasks_authoring:rubric", args=[task.pk])).content.decode()
    )
    assert _verdicts(_try(client, task, {"answer": "fact 1"}, headers=HTMX)) == {"c1": "met"}


def test_a_researcher_who_only_reads_the_task_gets_no_panel_and_403(client, expert, researcher):
    task = in_review_task(expert)
    # Approved directly: what approval itself requires (a passed validation) is not this test's subject.
    TaskVersion.objects.filter(pk=task.latest_version.pk).update(state="approved")
    Task.objects.filter(pk=task.pk).update(status="approved")
    client.force_login(researcher)
    html = client.get(reverse("tasks_authoring:rubric", args=[task.pk])).content.decode()
    assert 'id="rubric-trial"' not in html
    assert _try(client, task, {"answer": "fact 1"}).status_code == 403


@pytest.mark.parametrize("persona", ["outsider", "researcher", "reviewer"])
def test_people_who_cannot_see_the_draft_get_404(client, expert, persona, request):
    task = draft_task(expert)
    client.force_login(request.getfixturevalue(persona))
    assert _try(client, task, {"answer": "fact 1"}).status_code == 404


def test_it_needs_a_post(client, expert):
    task = draft_task(expert)
    client.force_login(expert)
    assert client.get(reverse("tasks_authoring:rubric_try", args=[task.pk])).status_code == 405


def test_without_htmx_the_whole_page_comes_back_with_the_results(client, expert):
    task = draft_task(expert)
    client.force_login(expert)
    html = _try(client, task, {"answer": "fact 1"}).content.decode()
    assert '<section id="rubric"' in html and "Score 1.00 · passed" in html


def test_a_refusal_is_shown_in_the_panel(client, expert):
    task = services.task_create(owner=expert, title="Empty", domain="finance", instruction="Q?")
    client.force_login(expert)
    response = _try(client, task, {"source": "golden"}, headers=HTMX)
    assert "This version has no golden answer yet" in response.content.decode()
    html = _try(client, task, {"answer": "x"}).content.decode()
    assert "The rubric has no criteria yet" in html
