import pytest
from django.urls import reverse

from tasks_authoring.models import TaskSet
from tests.tasks_authoring.web_helpers import approved_task

pytestmark = pytest.mark.django_db


@pytest.fixture
def approved(expert, reviewer):
    return [
        approved_task(expert, reviewer, title="Bond pricing", domain="finance"),
        approved_task(expert, reviewer, title="Lease review", domain="law"),
        approved_task(expert, reviewer, title="Market sizing", domain="consulting"),
    ]


def test_a_set_is_built_from_the_current_filters(client, researcher, approved):
    client.force_login(researcher)
    url = reverse("tasks_authoring:task_set_create") + "?domain=law"
    page = client.get(url)
    assert [v.task.title for v in page.context["candidates"]] == ["Lease review"]
    response = client.post(url, {"name": "Law only", "seed": "3", "eval_fraction": "0", "use_filters": "on"})
    task_set = TaskSet.objects.get(name="Law only")
    assert response["Location"] == reverse("tasks_authoring:task_set_detail", args=[task_set.pk])
    assert [m.version.task.title for m in task_set.members.all()] == ["Lease review"]
    assert task_set.seed == 3


def test_a_set_is_built_by_hand_with_pinned_versions_and_shows_counts_by_domain(client, researcher, approved):
    client.force_login(researcher)
    versions = [task.latest_version.pk for task in approved[:2]]
    client.post(
        reverse("tasks_authoring:task_set_create"),
        {"name": "Picked", "seed": "11", "eval_fraction": "0.5", "versions": versions},
    )
    task_set = TaskSet.objects.get(name="Picked")
    assert sorted(task_set.members.values_list("version_id", flat=True)) == sorted(versions)
    response = client.get(reverse("tasks_authoring:task_set_detail", args=[task_set.pk]))
    counts = response.context["counts"]
    assert counts["total"] == 2 and set(counts["by_domain"]) == {"Finance", "Law"}
    assert 'seed <span class="mono">11</span>' in response.content.decode()


def test_building_with_nothing_picked_says_what_to_do(client, researcher, approved):
    client.force_login(researcher)
    response = client.post(
        reverse("tasks_authoring:task_set_create"), {"name": "Empty", "seed": "1", "eval_fraction": "0.2"}
    )
    assert "Pick at least one approved version" in response.content.decode()
    assert not TaskSet.objects.exists()


def test_the_list_is_empty_until_a_set_exists(client, researcher):
    client.force_login(researcher)
    assert "No task sets yet" in client.get(reverse("tasks_authoring:task_set_list")).content.decode()
