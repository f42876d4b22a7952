"""Tasks and versions: create, edit, submit (freeze + hash), review, new drafts, rubric, task sets."""

from __future__ import annotations

import pytest

from tasks_authoring import services
from tasks_authoring.models import Review, TaskSetMember
from tasks_authoring.services import AuthoringError, CriterionError, NotAllowed, ReadOnlyVersion, SubmitError
from tasks_authoring.services.task_sets import split_versions
from tests.tasks_authoring.data_helpers import approve, draft_with_rubric

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"


def test_create_makes_a_draft_version_one_with_a_unique_slug(expert):
    first = services.task_create(owner=expert, title="DCF of Acme", domain="finance")
    second = services.task_create(owner=expert, title="DCF of Acme", domain="finance")
    assert (first.slug, second.slug) == ("dcf-of-acme", "dcf-of-acme-2")
    assert first.latest_version.number == 1 and first.latest_version.is_editable
    assert first.status == "draft"


def test_create_refuses_non_experts_and_unknown_domains(expert, researcher):
    with pytest.raises(NotAllowed, match="only experts"):
        services.task_create(owner=researcher, title="x", domain="finance")
    with pytest.raises(AuthoringError, match="unknown domain 'astrology'; known domains: "):
        services.task_create(owner=expert, title="x", domain="astrology")


def test_update_validates_budgets_and_tool_names(expert):
    version = services.task_create(owner=expert, title="T", domain="law").latest_version
    services.task_version_update(
        version=version, user=expert, max_turns="12", tools=["read_pdf", "read_pdf"], title="New"
    )
    version.refresh_from_db()
    assert (version.max_turns, version.tools, version.task.title) == (12, ["read_pdf"], "New")
    with pytest.raises(AuthoringError, match="max_turns must be between 1 and 1,000, got 0"):
        services.task_version_update(version=version, user=expert, max_turns=0)
    with pytest.raises(AuthoringError, match="unknown tool name\\(s\\) fly; known tools: list_files"):
        services.task_version_update(version=version, user=expert, tools=["fly"])


def test_submit_lists_every_problem_of_an_unready_draft(expert):
    version = services.task_create(owner=expert, title="Empty", domain="law").latest_version
    with pytest.raises(SubmitError) as error:
        services.task_version_submit(version=version, user=expert)
    assert error.value.problems == ["the instruction is empty", "the rubric has no criteria"]


def test_submit_freezes_the_version_and_records_its_content_hash(expert):
    task = draft_with_rubric(expert)
    version = services.task_version_submit(version=task.latest_version, user=expert)
    task.refresh_from_db()
    assert (version.state, task.status) == ("in_review", "in_review")
    assert version.content_hash == services.version_content_hash(version) and len(version.content_hash) == 64
    with pytest.raises(ReadOnlyVersion, match="is in review and read-only"):
        services.task_version_update(version=version, user=expert, instruction="changed")


def test_review_approves_or_requests_changes_with_a_comment(expert, reviewer, make_user):
    task = draft_with_rubric(expert)
    version = services.task_version_submit(version=task.latest_version, user=expert)
    with pytest.raises(AuthoringError, match="say what needs to change"):
        services.review_decide(version=version, reviewer=reviewer, decision="request_changes")
    criterion = version.criteria.first()
    services.review_decide(
        version=version,
        reviewer=reviewer,
        decision="request_changes",
        comment="Tolerance too loose",
        criterion=criterion,
    )
    task.refresh_from_db()
    assert task.status == "changes_requested"
    assert Review.objects.get().criterion == criterion
    with pytest.raises(AuthoringError, match="is changes requested, not in review"):
        services.review_decide(version=version, reviewer=reviewer, decision="approve")


def test_a_reviewer_cannot_approve_their_own_task_and_experts_cannot_review(expert, make_user):
    both = make_user("bo_both", "expert", "reviewer")
    task = draft_with_rubric(both)
    version = services.task_version_submit(version=task.latest_version, user=both)
    with pytest.raises(NotAllowed, match="you cannot review your own task"):
        services.review_decide(version=version, reviewer=both, decision="approve")
    with pytest.raises(NotAllowed, match="only reviewers may approve"):
        services.review_decide(version=version, reviewer=expert, decision="approve")


def test_a_new_draft_copies_the_approved_version_which_stays_untouched(expert, reviewer):
    task = draft_with_rubric(expert)
    approved = approve(task, expert, reviewer)
    draft = services.task_version_new_draft(task=task, user=expert)
    assert draft.number == 2 and draft.is_editable
    assert list(draft.world_files.values_list("path", "blob_id")) == list(
        approved.world_files.values_list("path", "blob_id")
    )
    assert list(draft.criteria.values_list("key", "text")) == list(
        approved.criteria.values_list("key", "text")
    )
    services.task_version_update(version=draft, user=expert, instruction="Reworded")
    approved.refresh_from_db()
    assert approved.instruction == "What was Q3 revenue?" and approved.state == "approved"
    with pytest.raises(AuthoringError, match="v2 is still draft; edit it instead"):
        services.task_version_new_draft(task=task, user=expert)


def test_criteria_are_validated_per_kind_naming_the_field(expert):
    version = services.task_create(owner=expert, title="R", domain="finance").latest_version
    bad = [
        ({"text": "", "kind": "contains", "params": {"value": "x"}}, "text"),
        ({"text": "t", "kind": "vibes"}, "kind"),
        ({"text": "t", "kind": "regex", "params": {"pattern": "(unclosed"}}, "params"),
        ({"text": "t", "kind": "number_close", "params": {"value": "twelve"}}, "params"),
        (
            {
                "text": "t",
                "kind": "xlsx_cell_equals",
                "params": {"path": "out.xlsx", "cell": "B", "value": 1},
            },
            "params",
        ),
        ({"text": "t", "kind": "llm_judge", "weight": -1}, "weight"),
        ({"text": "t", "kind": "llm_judge", "key": "reward"}, "key"),
    ]
    for fields, field in bad:
        with pytest.raises(CriterionError) as error:
            services.criterion_create(version=version, user=expert, **fields)
        assert error.value.field == field
    assert not version.criteria.exists()


def test_criteria_can_be_updated_reordered_and_deleted(expert):
    version = services.task_create(owner=expert, title="R", domain="finance").latest_version
    for text in ("first", "second", "third"):
        services.criterion_create(version=version, user=expert, text=text, kind="llm_judge")
    assert list(version.criteria.values_list("key", "order")) == [("c1", 0), ("c2", 1), ("c3", 2)]
    services.criterion_reorder(version=version, user=expert, keys=["c3", "c1", "c2"])
    assert list(version.criteria.order_by("order").values_list("key", flat=True)) == ["c3", "c1", "c2"]
    with pytest.raises(CriterionError, match="give every criterion id exactly once"):
        services.criterion_reorder(version=version, user=expert, keys=["c1"])
    c1 = version.criteria.get(key="c1")
    services.criterion_update(
        criterion=c1, user=expert, kind="contains", params={"value": "12.5%"}, required=True
    )
    c1.refresh_from_db()
    assert (c1.kind, c1.params, c1.required) == ("contains", {"value": "12.5%"}, True)
    services.criterion_delete(criterion=version.criteria.get(key="c3"), user=expert)
    assert list(version.criteria.order_by("order").values_list("key", "order")) == [("c1", 0), ("c2", 1)]


def test_a_task_set_freezes_approved_versions_with_a_seeded_split(expert, reviewer, researcher):
    versions = [approve(draft_with_rubric(expert, title=f"Task {i}"), expert, reviewer) for i in range(5)]
    task_set = services.task_set_create(
        owner=researcher, name="Five", versions=versions, seed=42, eval_fraction=0.4
    )
    splits = dict(TaskSetMember.objects.values_list("version_id", "split"))
    assert splits == split_versions(versions, seed=42, eval_fraction=0.4)
    assert sorted(splits.values()) == ["eval", "eval", "train", "train", "train"]
    assert task_set.seed == 42
    from_filters = services.task_set_create(owner=researcher, name="By filter", filters={"domain": "finance"})
    assert from_filters.members.count() == 5 and from_filters.source_filters == {"domain": "finance"}


def test_a_task_set_refuses_drafts_and_non_researchers(expert, researcher):
    draft = draft_with_rubric(expert).latest_version
    with pytest.raises(AuthoringError, match=f"not approved: {draft.task.slug} v1"):
        services.task_set_create(owner=researcher, name="Bad", versions=[draft])
    with pytest.raises(NotAllowed, match="only researchers"):
        services.task_set_create(owner=expert, name="Mine", versions=[draft])
