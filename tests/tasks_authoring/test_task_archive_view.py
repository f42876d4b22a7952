"""Archiving an approved task: a confirmation page, then the task leaves the list but nothing is lost."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tasks_authoring import selectors, services
from tasks_authoring.errors import AuthoringError, NotAllowed
from tasks_authoring.models import Team
from tests.tasks_authoring.web_helpers import approved_task, draft_task

pytestmark = pytest.mark.django_db
LIST = reverse("tasks_authoring:task_list")


def _archive_url(task) -> str:
    return reverse("tasks_authoring:task_archive", args=[task.pk])


def _titles(response) -> list[str]:
    return [task.title for task in response.context["page"].object_list]


def test_the_owner_confirms_and_the_task_is_archived(client, expert, reviewer):
    task = approved_task(expert, reviewer)
    client.force_login(expert)
    detail = client.get(reverse("tasks_authoring:task_detail", args=[task.pk])).content.decode()
    assert f'href="{_archive_url(task)}"' in detail
    confirmation = client.get(_archive_url(task))
    assert "Archive this task?" in confirmation.content.decode()
    task.refresh_from_db()
    assert task.status == "approved"  # looking at the confirmation changes nothing

    response = client.post(_archive_url(task), follow=True)
    task.refresh_from_db()
    assert task.status == "archived"
    assert "Archived “APAC growth check”" in response.content.decode()
    assert task.latest_version.state == "approved"  # the version itself stays as it was


def test_archived_tasks_leave_the_list_unless_the_status_filter_asks_for_them(client, expert, reviewer):
    kept = approved_task(expert, reviewer, title="Kept")
    gone = approved_task(expert, reviewer, title="Gone")
    services.task_archive(task=gone, user=expert)
    client.force_login(expert)
    assert _titles(client.get(LIST)) == ["Kept"]
    assert _titles(client.get(LIST, {"status": "archived"})) == ["Gone"]
    assert "show them" in client.get(LIST).content.decode()
    assert client.get(reverse("tasks_authoring:task_detail", args=[gone.pk])).status_code == 200
    assert [v.task for v in selectors.approved_versions(user=expert)] == [kept]


def test_an_admin_may_archive_but_a_colleague_or_teammate_may_not(
    client, expert, reviewer, admin_user, make_user
):
    task = approved_task(expert, reviewer)
    teammate = make_user("tia_expert", "expert")
    team = Team.objects.create(name="Deals")
    team.members.add(expert, teammate)
    task.team = team
    task.save()
    for person in (teammate, reviewer):
        client.force_login(person)
        assert client.get(_archive_url(task)).status_code == 403
        assert client.post(_archive_url(task)).status_code == 403
        assert (
            "Archive…"
            not in client.get(reverse("tasks_authoring:task_detail", args=[task.pk])).content.decode()
        )
    with pytest.raises(NotAllowed, match="only the task's owner and admins may archive it"):
        services.task_archive(task=task, user=teammate)
    client.force_login(admin_user)
    client.post(_archive_url(task))
    task.refresh_from_db()
    assert task.status == "archived"


def test_a_task_that_is_not_approved_cannot_be_archived(client, expert):
    task = draft_task(expert)
    client.force_login(expert)
    assert client.get(_archive_url(task)).status_code == 403
    with pytest.raises(AuthoringError, match="only approved tasks are archived; apac-growth-check is draft"):
        services.task_archive(task=task, user=expert)


def test_an_outsider_gets_404(client, expert, reviewer, outsider):
    task = approved_task(expert, reviewer)
    client.force_login(outsider)
    assert client.get(_archive_url(task)).status_code == 404
