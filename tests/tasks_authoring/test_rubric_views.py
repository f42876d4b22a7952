import pytest
from django.urls import reverse

from tests.tasks_authoring.web_helpers import draft_task

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true", "HX-Target": "rubric"}


def _keys_and_texts(task):
    return list(task.latest_version.criteria.order_by("order").values_list("key", "text"))


def test_adding_a_criterion_inline_returns_the_rubric_partial(client, expert):
    task = draft_task(expert)
    client.force_login(expert)
    response = client.post(
        reverse("tasks_authoring:criterion_add", args=[task.pk]),
        {"text": "States growth is 12.5%", "kind": "number_close", "weight": "2", "required": "on",
         "param_value": "12.5", "param_rel_tol": "0.01", "param_pattern": "ignored: another kind's field"},
        headers=HTMX,
    )  # fmt: skip
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="rubric"')
    criterion = task.latest_version.criteria.get(text="States growth is 12.5%")
    assert (criterion.kind, criterion.params, criterion.weight, criterion.required) == (
        "number_close",
        {"value": 12.5, "rel_tol": 0.01},
        2.0,
        True,
    )


def test_a_number_that_does_not_parse_is_shown_next_to_its_field(client, expert):
    task = draft_task(expert)
    client.force_login(expert)
    response = client.post(
        reverse("tasks_authoring:criterion_add", args=[task.pk]),
        {"text": "States growth", "kind": "number_close", "weight": "1", "param_value": "twelve"},
    )
    assert response.context["add_form"].errors["param_value"] == ["'twelve' is not a number"]
    assert "&#x27;twelve&#x27; is not a number" in response.content.decode()
    assert task.latest_version.criteria.count() == 1


def test_a_bad_regex_from_the_service_is_shown_next_to_the_pattern(client, expert):
    task = draft_task(expert)
    client.force_login(expert)
    response = client.post(
        reverse("tasks_authoring:criterion_add", args=[task.pk]),
        {"text": "Names the clause", "kind": "regex", "weight": "1", "param_pattern": "([unclosed"},
    )
    errors = response.context["add_form"].errors
    assert "param_pattern" in errors
    assert task.latest_version.criteria.count() == 1


def test_a_missing_required_param_is_shown_next_to_that_param(client, expert):
    task = draft_task(expert)
    client.force_login(expert)
    response = client.post(
        reverse("tasks_authoring:criterion_add", args=[task.pk]),
        {"text": "Wrote the file", "kind": "file_exists", "weight": "1"},
    )
    assert "param_path" in response.context["add_form"].errors


def test_editing_a_criterion_inline(client, expert):
    task = draft_task(expert)
    criterion = task.latest_version.criteria.get()
    client.force_login(expert)
    url = reverse("tasks_authoring:criterion_edit", args=[task.pk, criterion.pk])
    form = client.get(url, headers=HTMX).content.decode()
    assert f'name="c{criterion.pk}-text"' in form and "States fact 1" in form
    prefix = f"c{criterion.pk}-"
    client.post(
        url,
        {f"{prefix}text": "States fact one", f"{prefix}kind": "contains", f"{prefix}weight": "1",
         f"{prefix}param_value": "one", f"{prefix}param_case_sensitive": "on"},
        headers=HTMX,
    )  # fmt: skip
    criterion.refresh_from_db()
    assert (criterion.text, criterion.params) == ("States fact one", {"value": "one", "case_sensitive": True})


def test_reordering_with_up_and_down_and_deleting(client, expert):
    task = draft_task(expert, criteria=3)
    client.force_login(expert)
    first, second, third = task.latest_version.criteria.order_by("order")
    client.post(
        reverse("tasks_authoring:criterion_move", args=[task.pk, third.pk]), {"direction": "up"}, headers=HTMX
    )
    assert [text for _, text in _keys_and_texts(task)] == ["States fact 1", "States fact 3", "States fact 2"]
    client.post(
        reverse("tasks_authoring:criterion_move", args=[task.pk, first.pk]), {"direction": "up"}, headers=HTMX
    )
    assert [text for _, text in _keys_and_texts(task)][0] == "States fact 1"
    client.post(reverse("tasks_authoring:criterion_delete", args=[task.pk, second.pk]), headers=HTMX)
    assert [text for _, text in _keys_and_texts(task)] == ["States fact 1", "States fact 3"]


def test_the_rubric_of_a_submitted_version_is_read_only(client, expert):
    from tests.tasks_authoring.web_helpers import in_review_task

    task = in_review_task(expert)
    client.force_login(expert)
    html = client.get(reverse("tasks_authoring:rubric", args=[task.pk])).content.decode()
    assert "Add a criterion" not in html and "read-only" in html
    criterion = task.latest_version.criteria.get()
    assert (
        client.post(reverse("tasks_authoring:criterion_delete", args=[task.pk, criterion.pk])).status_code
        == 403
    )
