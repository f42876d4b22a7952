"""Reads: who sees which task, filters and annotations in constant queries, review queue, diffs, counts."""

from __future__ import annotations

import io

import pytest
from django.http import Http404

from tasks_authoring import selectors, services
from tests.tasks_authoring.data_helpers import approve, draft_with_rubric

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"


@pytest.fixture
def tasks(expert, make_user, reviewer):
    other = make_user("olga_expert", "expert")
    return {
        "mine_draft": draft_with_rubric(expert, title="My draft"),
        "other_draft": draft_with_rubric(other, title="Other draft"),
        "other_in_review": _submitted(draft_with_rubric(other, title="Other in review"), other),
        "approved": _approved(draft_with_rubric(other, title="Approved APAC growth"), other, reviewer),
        "other": other,
    }


def _submitted(task, owner):
    services.task_version_submit(version=task.latest_version, user=owner)
    return task


def _approved(task, owner, reviewer):
    approve(task, owner, reviewer)
    return task


def _titles(user, filters=None) -> set[str]:
    return {task.title for task in selectors.tasks_for_user(user=user, filters=filters)}


def test_visibility_follows_the_roles(tasks, expert, researcher, reviewer, admin_user, outsider):
    assert _titles(expert) == {"My draft", "Approved APAC growth"}
    assert _titles(researcher) == {"Approved APAC growth"}
    assert _titles(reviewer) == {"Other in review", "Approved APAC growth"}
    assert _titles(admin_user) == {"My draft", "Other draft", "Other in review", "Approved APAC growth"}
    assert _titles(outsider) == set()
    with pytest.raises(Http404):
        selectors.task_visible_to(user=expert, pk=tasks["other_draft"].pk)


def test_a_team_shares_its_drafts(tasks, expert):
    from tasks_authoring.models import Team

    team = Team.objects.create(name="Deal team")
    team.members.add(expert)
    draft = tasks["other_draft"]
    draft.team = team
    draft.save()
    assert selectors.task_visible_to(user=expert, pk=draft.pk) == draft


def test_filters_search_title_and_instruction(tasks, admin_user):
    assert _titles(admin_user, {"q": "apac"}) == {"Approved APAC growth"}
    assert len(_titles(admin_user, {"q": "q3 revenue"})) == 4
    assert _titles(admin_user, {"status": "in_review"}) == {"Other in review"}
    assert _titles(admin_user, {"owner": "olga_expert", "domain": "finance"}) == {
        "Other draft",
        "Other in review",
        "Approved APAC growth",
    }
    titles = [t.title for t in selectors.tasks_for_user(user=admin_user, filters={"sort": "title"})]
    assert titles == sorted(titles)


def test_rows_carry_version_and_counts_in_a_constant_number_of_queries(
    tasks, admin_user, expert, django_assert_num_queries
):
    version = tasks["mine_draft"].latest_version
    services.world_file_upload(version=version, user=expert, path="more.txt", uploaded=io.BytesIO(b"x"))
    admin_user._practicum_roles = None
    selectors.tasks_for_user(user=admin_user).count()  # caches the roles
    with django_assert_num_queries(1):
        rows = {t.title: t for t in selectors.tasks_for_user(user=admin_user)}
    mine = rows["My draft"]
    assert (mine.latest_version_number, mine.file_count, mine.criteria_count) == (1, 2, 2)
    assert mine.latest_version_state == "draft"


def test_review_queue_leaves_out_the_reviewers_own_tasks(tasks, reviewer, expert):
    assert [v.task.title for v in selectors.review_queue(reviewer=reviewer)] == ["Other in review"]
    assert list(selectors.review_queue(reviewer=expert)) == []


def test_version_diff_shows_instruction_files_and_rubric_changes(tasks, expert, reviewer):
    task = tasks["mine_draft"]
    old = approve(task, expert, reviewer)
    new = services.task_version_new_draft(task=task, user=expert)
    services.task_version_update(version=new, user=expert, instruction="What was Q4 revenue?", max_turns=10)
    services.world_file_upload(version=new, user=expert, path="q4.txt", uploaded=io.BytesIO(b"Q4"))
    services.world_file_delete(world_file=new.world_files.get(path="notes.txt"), user=expert)
    services.criterion_update(criterion=new.criteria.get(key="c1"), user=expert, params={"value": 130})
    diff = selectors.version_diff(old=old, new=new)
    assert "-What was Q3 revenue?" in diff["instruction"] and "+What was Q4 revenue?" in diff["instruction"]
    assert diff["fields"] == [{"field": "max_turns", "old": 30, "new": 10}]
    assert diff["files"] == {"added": ["q4.txt"], "removed": ["notes.txt"], "changed": []}
    assert [(c["key"], c["fields"]) for c in diff["rubric"]["changed"]] == [("c1", ["params"])]
    assert not diff["unchanged"]


def test_world_tree_nests_folders(expert):
    version = services.task_create(owner=expert, title="Tree", domain="law").latest_version
    for path in ("b.txt", "docs/a.txt", "docs/deep/c.txt"):
        services.world_file_upload(version=version, user=expert, path=path, uploaded=io.BytesIO(b"x"))
    tree = selectors.world_tree(version=version)
    assert [f.path for f in tree["files"]] == ["b.txt"]
    docs = tree["folders"][0]
    assert (docs["path"], [f.path for f in docs["files"]]) == ("docs", ["docs/a.txt"])
    assert docs["folders"][0]["path"] == "docs/deep"


def test_approved_versions_keep_a_task_whose_new_draft_is_open(tasks, researcher, make_user):
    approved = tasks["approved"]
    services.task_version_new_draft(task=approved, user=tasks["other"])
    versions = list(selectors.approved_versions(user=researcher))
    assert [(v.task.title, v.number) for v in versions] == [("Approved APAC growth", 1)]


def test_task_set_counts_by_split_and_domain(tasks, researcher):
    version = tasks["approved"].versions.get(number=1)
    task_set = services.task_set_create(
        owner=researcher, name="One", versions=[version], seed=1, eval_fraction=0
    )
    assert selectors.task_set_counts(task_set=task_set) == {
        "total": 1,
        "by_split": {"train": 1},
        "by_domain": {"Finance": {"train": 1}},
        "by_difficulty": {"unrated": 1},
    }
