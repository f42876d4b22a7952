import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tasks_authoring import services
from tests.tasks_authoring.web_helpers import approved_task, draft_task

pytestmark = pytest.mark.django_db
URL = reverse("tasks_authoring:task_list")


def _rows(response) -> list:
    return list(response.context["page"].object_list)


def test_it_shows_each_task_with_status_version_and_counts(client, expert):
    task = draft_task(expert, criteria=3)
    client.force_login(expert)
    response = client.get(URL)
    assert response.status_code == 200
    [row] = _rows(response)
    assert (row.pk, row.latest_version_number, row.file_count, row.criteria_count) == (task.pk, 1, 1, 3)
    html = response.content.decode()
    assert "APAC growth check" in html and "Draft" in html and "erin_expert" in html


def test_it_filters_by_domain_status_owner_and_text_from_the_url(client, expert, reviewer, make_user):
    draft_task(expert, title="Lease accounting", domain="law")
    approved_task(expert, reviewer, title="Margin bridge", domain="finance")
    colleague = make_user("ed_expert", "expert")
    draft_task(colleague, title="Colleague draft", domain="finance")
    client.force_login(expert)
    titles = lambda query: [task.title for task in _rows(client.get(URL, query))]  # noqa: E731
    assert titles({"domain": "law"}) == ["Lease accounting"]
    assert titles({"status": "approved"}) == ["Margin bridge"]
    assert titles({"owner": "erin_expert", "sort": "title"}) == ["Lease accounting", "Margin bridge"]
    assert titles({"q": "adjusted"}) == ["Margin bridge", "Lease accounting"]  # matched in the instruction
    assert titles({"q": "bridge"}) == ["Margin bridge"]


def test_bad_filter_values_fall_back_instead_of_failing(client, expert):
    draft_task(expert)
    client.force_login(expert)
    response = client.get(
        URL, {"page": "abc", "sort": "drop table", "status": "nonsense", "domain": "astrology"}
    )
    assert response.status_code == 200
    assert len(_rows(response)) == 1
    assert client.get(URL, {"page": "99999999"}).status_code == 200


def test_it_sorts_by_title_both_ways(client, expert):
    for title in ("Beta", "Alpha", "Gamma"):
        services.task_create(owner=expert, title=title, domain="finance")
    client.force_login(expert)
    assert [t.title for t in _rows(client.get(URL, {"sort": "title"}))] == ["Alpha", "Beta", "Gamma"]
    assert [t.title for t in _rows(client.get(URL, {"sort": "-title"}))] == ["Gamma", "Beta", "Alpha"]


def test_it_paginates_on_the_server_and_keeps_the_filters_in_the_links(client, expert, monkeypatch):
    monkeypatch.setattr("tasks_authoring.views.tasks.PAGE_SIZE", 2)
    for number in range(5):
        services.task_create(owner=expert, title=f"Task {number}", domain="finance")
    client.force_login(expert)
    response = client.get(URL, {"sort": "title", "page": 3})
    assert [t.title for t in _rows(response)] == ["Task 4"]
    html = response.content.decode()
    assert "Page 3 of 3" in html
    assert 'href="?sort=title&amp;page=2"' in html


def test_an_htmx_request_gets_only_the_results_partial(client, expert):
    draft_task(expert)
    client.force_login(expert)
    response = client.get(URL, {"q": "APAC"}, headers={"HX-Request": "true"})
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="results">')
    assert "<html" not in html and "APAC growth check" in html


def test_the_empty_state_says_what_to_do_next(client, expert, researcher):
    client.force_login(expert)
    assert "Write your first task" in client.get(URL).content.decode()
    assert "Clear the filters" in client.get(URL, {"q": "zzz"}).content.decode()
    client.force_login(researcher)
    assert "once experts write them and a reviewer approves them" in client.get(URL).content.decode()


def test_the_number_of_queries_does_not_grow_with_the_page(client, expert):
    client.force_login(expert)
    draft_task(expert, title="One")
    client.get(URL)  # warm the session and role caches
    with CaptureQueriesContext(connection) as one_task:
        client.get(URL)
    for number in range(6):
        draft_task(expert, title=f"More {number}", criteria=2)
    with CaptureQueriesContext(connection) as seven_tasks:
        client.get(URL)
    assert len(seven_tasks) == len(one_task)


def test_an_outsider_gets_404(client, outsider):
    client.force_login(outsider)
    assert client.get(URL).status_code == 404


def test_it_sorts_by_owner_from_the_column_header(client, expert, make_user, admin_user):
    services.task_create(owner=make_user("zed_expert", "expert"), title="Zed's", domain="finance")
    services.task_create(owner=make_user("abe_expert", "expert"), title="Abe's", domain="finance")
    services.task_create(owner=expert, title="Erin's", domain="finance")
    client.force_login(admin_user)
    response = client.get(URL, {"sort": "owner"})
    assert [t.owner.username for t in _rows(response)] == ["abe_expert", "erin_expert", "zed_expert"]
    html = response.content.decode()
    assert '<th aria-sort="ascending"><a href="?sort=-owner">Owner' in html  # a second click reverses it
    reversed_rows = _rows(client.get(URL, {"sort": "-owner"}))
    assert [t.owner.username for t in reversed_rows] == ["zed_expert", "erin_expert", "abe_expert"]
    assert '<option value="owner" selected>Owner A–Z</option>' in response.content.decode()
