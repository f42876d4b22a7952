"""Every view of the authoring app × every persona × method → the status each one must get."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tasks_authoring import services
from tests.tasks_authoring.web_helpers import approved_task, draft_task, in_review_task

pytestmark = pytest.mark.django_db

PERSONAS = ("owner", "other_expert", "researcher", "reviewer", "outsider")


@pytest.fixture
def world(expert, make_user, researcher, reviewer, outsider):
    other_reviewer = make_user("rita_reviewer", "reviewer")
    draft = draft_task(expert, title="Draft task")
    approved = approved_task(expert, other_reviewer, title="Approved task")
    in_review = in_review_task(expert, title="Task in review")
    task_set = services.task_set_create(
        owner=researcher, name="Finance eval", versions=[approved.latest_version], seed=7, eval_fraction=0.5
    )
    # The researcher's finished export of the approved task: only its owner (and admins) may open it.
    export_job = services.export_job_create(user=researcher, version=approved.latest_version)
    services.export_job_run(export_job_id=export_job.pk)
    users = {
        "owner": expert,
        "other_expert": make_user("ed_expert", "expert"),
        "researcher": researcher,
        "reviewer": reviewer,
        "outsider": outsider,
    }
    return {
        "draft": draft,
        "approved": approved,
        "in_review": in_review,
        "task_set": task_set,
        "export_job": export_job,
        "users": users,
    }


def _url(world, name: str) -> str:
    draft, approved, in_review = world["draft"], world["approved"], world["in_review"]
    draft_file = draft.latest_version.world_files.first()
    draft_criterion = draft.latest_version.criteria.first()
    urls = {
        "list": reverse("tasks_authoring:task_list"),
        "create": reverse("tasks_authoring:task_create"),
        "import": reverse("tasks_authoring:import"),
        "preview": reverse("tasks_authoring:markdown_preview"),
        "review_queue": reverse("tasks_authoring:review_queue"),
        "task_sets": reverse("tasks_authoring:task_set_list"),
        "task_set_new": reverse("tasks_authoring:task_set_create"),
        "task_set": reverse("tasks_authoring:task_set_detail", args=[world["task_set"].pk]),
        "task_set_export": reverse("tasks_authoring:task_set_export", args=[world["task_set"].pk]),
        "draft": reverse("tasks_authoring:task_detail", args=[draft.pk]),
        "draft_edit": reverse("tasks_authoring:task_edit", args=[draft.pk]),
        "draft_world": reverse("tasks_authoring:world_manager", args=[draft.pk]),
        "draft_world_status": reverse("tasks_authoring:world_status", args=[draft.pk]),
        "draft_upload": reverse("tasks_authoring:world_upload", args=[draft.pk]),
        "draft_file": reverse("tasks_authoring:world_file", args=[draft.pk, draft_file.pk]),
        "draft_file_move": reverse("tasks_authoring:world_file_move", args=[draft.pk, draft_file.pk]),
        "draft_file_delete": reverse("tasks_authoring:world_file_delete", args=[draft.pk, draft_file.pk]),
        "draft_rubric": reverse("tasks_authoring:rubric", args=[draft.pk]),
        "draft_criterion_add": reverse("tasks_authoring:criterion_add", args=[draft.pk]),
        "draft_rubric_try": reverse("tasks_authoring:rubric_try", args=[draft.pk]),
        "in_review_rubric_try": reverse("tasks_authoring:rubric_try", args=[in_review.pk]),
        "approved_rubric_try": reverse("tasks_authoring:rubric_try", args=[approved.pk]),
        "draft_criterion_edit": reverse(
            "tasks_authoring:criterion_edit", args=[draft.pk, draft_criterion.pk]
        ),
        "draft_criterion_move": reverse(
            "tasks_authoring:criterion_move", args=[draft.pk, draft_criterion.pk]
        ),
        "draft_criterion_delete": reverse(
            "tasks_authoring:criterion_delete", args=[draft.pk, draft_criterion.pk]
        ),
        "draft_agent": reverse("tasks_authoring:agent_view", args=[draft.pk]),
        "draft_diff": reverse("tasks_authoring:version_diff", args=[draft.pk]),
        "draft_submit": reverse("tasks_authoring:task_submit", args=[draft.pk]),
        "draft_export": reverse("tasks_authoring:version_export", args=[draft.pk]),
        "approved": reverse("tasks_authoring:task_detail", args=[approved.pk]),
        "approved_edit": reverse("tasks_authoring:task_edit", args=[approved.pk]),
        "approved_upload": reverse("tasks_authoring:world_upload", args=[approved.pk]),
        "approved_new_draft": reverse("tasks_authoring:task_new_draft", args=[approved.pk]),
        "approved_export": reverse("tasks_authoring:version_export", args=[approved.pk]),
        "approved_archive": reverse("tasks_authoring:task_archive", args=[approved.pk]),
        "draft_archive": reverse("tasks_authoring:task_archive", args=[draft.pk]),
        "export_job": reverse("tasks_authoring:export_job", args=[world["export_job"].pk]),
        "export_job_download": reverse("tasks_authoring:export_job_download", args=[world["export_job"].pk]),
        "in_review": reverse("tasks_authoring:task_detail", args=[in_review.pk]),
        "in_review_decide": reverse("tasks_authoring:review_decide", args=[in_review.pk]),
    }
    return urls[name]


# (url name, method, POST data, expected status for owner, other_expert, researcher, reviewer, outsider)
MATRIX = [
    ("list", "get", None, (200, 200, 200, 200, 404)),
    ("create", "get", None, (200, 200, 404, 404, 404)),
    ("import", "get", None, (200, 200, 404, 404, 404)),
    ("preview", "post", {"instruction": "# Hi"}, (200, 200, 200, 200, 404)),
    ("review_queue", "get", None, (404, 404, 404, 200, 404)),
    ("task_sets", "get", None, (404, 404, 200, 200, 404)),
    ("task_set_new", "get", None, (404, 404, 200, 404, 404)),
    ("task_set", "get", None, (404, 404, 200, 200, 404)),
    ("task_set_export", "post", {}, (404, 404, 302, 302, 404)),
    ("draft", "get", None, (200, 404, 404, 404, 404)),
    ("draft_edit", "get", None, (200, 404, 404, 404, 404)),
    ("draft_edit", "post", {"max_turns": "0"}, (200, 404, 404, 404, 404)),
    ("draft_world", "get", None, (200, 404, 404, 404, 404)),
    ("draft_world_status", "get", None, (286, 404, 404, 404, 404)),
    ("draft_upload", "post", {}, (302, 404, 404, 404, 404)),
    ("draft_file", "get", None, (200, 404, 404, 404, 404)),
    ("draft_file_move", "post", {"new_path": "moved/readme.txt"}, (302, 404, 404, 404, 404)),
    ("draft_file_delete", "post", {}, (302, 404, 404, 404, 404)),
    ("draft_rubric", "get", None, (200, 404, 404, 404, 404)),
    ("draft_criterion_add", "post", {}, (400, 404, 404, 404, 404)),
    ("draft_rubric_try", "post", {"answer": "x"}, (200, 404, 404, 404, 404)),
    ("in_review_rubric_try", "post", {"answer": "x"}, (200, 404, 404, 200, 404)),
    ("approved_rubric_try", "post", {"answer": "x"}, (200, 403, 403, 200, 404)),
    ("draft_criterion_edit", "get", None, (200, 404, 404, 404, 404)),
    ("draft_criterion_move", "post", {"direction": "down"}, (302, 404, 404, 404, 404)),
    ("draft_criterion_delete", "post", {}, (302, 404, 404, 404, 404)),
    ("draft_agent", "get", None, (200, 404, 404, 404, 404)),
    ("draft_diff", "get", None, (200, 404, 404, 404, 404)),
    ("draft_submit", "post", {}, (302, 404, 404, 404, 404)),
    ("draft_export", "post", {}, (302, 404, 404, 404, 404)),
    ("draft_archive", "get", None, (403, 404, 404, 404, 404)),
    ("approved", "get", None, (200, 200, 200, 200, 404)),
    ("approved_edit", "get", None, (302, 302, 302, 302, 404)),
    ("approved_upload", "post", {}, (403, 403, 403, 403, 404)),
    ("approved_new_draft", "post", {}, (302, 302, 302, 302, 404)),
    ("approved_export", "post", {}, (302, 302, 302, 302, 404)),
    ("approved_archive", "get", None, (200, 403, 403, 403, 404)),
    ("approved_archive", "post", {}, (302, 403, 403, 403, 404)),
    ("export_job", "get", None, (404, 404, 200, 404, 404)),
    ("export_job_download", "get", None, (404, 404, 200, 404, 404)),
    ("in_review", "get", None, (200, 404, 404, 200, 404)),
    ("in_review_decide", "post", {"decision": "approve"}, (404, 404, 404, 302, 404)),
]

CASES = [
    pytest.param(name, method, data, persona, expected[index], id=f"{method}-{name}-{persona}")
    for name, method, data, expected in MATRIX
    for index, persona in enumerate(PERSONAS)
]


@pytest.mark.parametrize(("name", "method", "data", "persona", "expected"), CASES)
def test_each_persona_gets_the_expected_status(client, world, name, method, data, persona, expected):
    client.force_login(world["users"][persona])
    url = _url(world, name)
    response = client.post(url, data or {}) if method == "post" else client.get(url)
    assert response.status_code == expected


@pytest.mark.parametrize(
    ("name", "method", "data"), [(n, m, d) for n, m, d, _ in MATRIX], ids=lambda v: str(v)
)
def test_an_anonymous_visitor_is_sent_to_the_login_page(client, world, name, method, data):
    url = _url(world, name)
    response = client.post(url, data or {}) if method == "post" else client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_every_url_of_the_app_is_in_the_matrix():
    from tasks_authoring.urls import urlpatterns

    covered = {
        "task_list", "task_create", "import", "markdown_preview", "review_queue", "task_set_list",
        "task_set_create", "task_set_detail", "task_set_export", "task_detail", "task_edit", "world_manager",
        "world_status", "world_upload", "world_file", "world_file_move", "world_file_delete", "rubric",
        "criterion_add", "rubric_try", "criterion_edit", "criterion_move", "criterion_delete", "agent_view", "version_diff",
        "task_submit", "version_export", "task_new_draft", "review_decide", "task_archive", "export_job",
        "export_job_download",
    }  # fmt: skip
    assert {pattern.name for pattern in urlpatterns} == covered


def test_forms_without_a_csrf_token_are_refused(world):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(world["users"]["owner"])
    response = client.post(_url(world, "draft_submit"))
    assert response.status_code == 403
    world["draft"].refresh_from_db()
    assert world["draft"].status == "draft"
