"""The demo content: idempotent bootstrap, golden answers that meet their deterministic criteria,
and exported demo bundles that load with rl_engine's loader."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db.models import F

from rl_engine.bundle import load_bundle
from rl_engine.grading import grade
from rl_engine.grading.checks import DETERMINISTIC_KINDS
from runs.models import CriterionReview, ValidationStatus, VersionValidation
from runs.services.validation import (
    latest_finished_validation,
    validation_problem,
    version_validation_run_inline,
)
from tasks_authoring.bundles import bundle_export
from tasks_authoring.demo import BROKEN_DRAFT_SLUG, DEMO_SEED, DEMO_TASK_SET
from tasks_authoring.demo_catalogue import demo_tasks
from tasks_authoring.models import (
    Criterion,
    ExtractionStatus,
    Task,
    TaskSet,
    TaskStatus,
    TaskVersion,
    WorldFile,
)
from tasks_authoring.services import task_version_submit, world_file_extract
from tests.rl_engine.fake_judge import FakeJudge, verdict_reply
from webapp.testing.services import free_port

pytestmark = pytest.mark.django_db


@pytest.fixture
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


@pytest.fixture
def bootstrapped(media, settings, tmp_path):
    """Set up with no judge answering (a port nobody listens on): the override path."""
    settings.VAR_DIR = tmp_path
    settings.PRACTICUM_JUDGE_URL = f"http://127.0.0.1:{free_port()}/v1"
    call_command("bootstrap_demo", stdout=open(tmp_path / "out.txt", "w"))
    return Task.objects.filter(slug__startswith="demo-")


def _counts() -> dict[str, int]:
    return {
        model.__name__: model.objects.count() for model in (Task, TaskVersion, WorldFile, Criterion, TaskSet)
    }


def test_bootstrap_creates_six_approved_tasks_in_three_domains_and_a_seeded_task_set(bootstrapped):
    assert bootstrapped.count() >= 6
    assert set(bootstrapped.values_list("status", flat=True)) == {TaskStatus.APPROVED}
    assert {"finance", "law", "consulting"} <= set(bootstrapped.values_list("domain__slug", flat=True))
    for task in bootstrapped:
        version = task.latest_version
        assert task.owner.username == "expert"
        assert version.reviews.get(decision="approve").reviewer.username == "reviewer"
        assert len(version.content_hash) == 64
        assert {"pdf", "xlsx", "email"} <= set(version.world_files.values_list("kind", flat=True))
        assert version.world_files.filter(kind="chat").exists()
        kinds = set(version.criteria.values_list("kind", flat=True))
        assert "llm_judge" in kinds and kinds & set(DETERMINISTIC_KINDS)
    task_set = TaskSet.objects.get(name=DEMO_TASK_SET)
    assert task_set.seed == DEMO_SEED
    assert task_set.members.count() == 6
    assert set(task_set.members.values_list("split", flat=True)) == {"train", "eval"}


def _latest_validations(tasks) -> list[VersionValidation]:
    return [latest_finished_validation(task.latest_version) for task in tasks]


def test_without_a_judge_the_admin_overrides_saying_no_judge_answered(bootstrapped, settings, tmp_path):
    validations = _latest_validations(bootstrapped)
    assert {v.status for v in validations} == {ValidationStatus.FAILED}
    for validation in validations:
        assert validation.overridden_by.username == "admin"
        assert validation.override_reason.startswith(
            f"No llm_judge endpoint answered at {settings.PRACTICUM_JUDGE_URL} when bootstrap_demo"
        )
        assert "JUDGE" in validation.override_reason
    assert (
        f"No llm_judge endpoint answers at {settings.PRACTICUM_JUDGE_URL}"
        in (tmp_path / "out.txt").read_text()
    )


def _bootstrap_with(judge: FakeJudge, out: Path) -> str:
    started = time.monotonic()
    with open(out, "w") as stdout:
        call_command("bootstrap_demo", judge_url=judge.base_url, stdout=stdout)
    print(f"bootstrap_demo with a judge took {time.monotonic() - started:.1f} s")
    return out.read_text()


def test_with_a_judge_every_demo_task_validates_cleanly_and_the_broken_draft_is_caught(
    media, settings, tmp_path
):
    settings.VAR_DIR = tmp_path
    with FakeJudge(("ok", verdict_reply(True, "Yes, it holds"))) as judge:
        output = _bootstrap_with(judge, tmp_path / "out.txt")
        tasks = Task.objects.filter(slug__in=[spec.slug for spec in demo_tasks()])
        validations = _latest_validations(tasks)
        assert len(validations) == 6
        assert [(v.status, v.overridden_by) for v in validations] == [(ValidationStatus.PASSED, None)] * 6
        for validation in validations:
            assert all(check["ok"] for check in validation.checks), validation.checks
            assert validation.run.spec["judge"]["base_url"] == judge.base_url
        # The oracle's and the null agent's judged criteria were asked; the empty answer's were not.
        prompts = [r["body"]["messages"][-1]["content"] for r in judge.requests]
        assert len(prompts) == 12 and not any("<final_answer>\n\n</final_answer>" in p for p in prompts)
        assert f"6 validated against the judge at {judge.base_url} in " in output
        # The demo reviewer reviews the validations' verdicts at once: the yes-saying judge's verdict on
        # the null agent's "I don't know." is overturned on every task.
        reviews = CriterionReview.objects.filter(reviewer__username="reviewer")
        assert f"Demo criterion reviews: {reviews.count()} added" in output
        overturned = reviews.exclude(reviewer_met=F("grader_met"))
        assert (
            sorted(overturned.values_list("rollout__policy", "criterion_kind")) == [("null", "llm_judge")] * 6
        )

        draft = Task.objects.get(slug=BROKEN_DRAFT_SLUG).latest_version
        task_version_submit(version=draft, user=draft.task.owner)
        version_validation_run_inline(version=draft, user=draft.task.owner, trigger="submit")
    assert validation_problem(draft).startswith(f"{BROKEN_DRAFT_SLUG} v1: its validation failed (")
    failed = {c["key"]: c["reason"] for c in latest_finished_validation(draft).checks if not c["ok"]}
    assert set(failed) == {"oracle_passes", "golden_meets_criteria"}
    assert failed["golden_meets_criteria"].startswith("c2 (regex): the pattern 'target (was )?missed'")


def test_a_later_start_with_a_judge_validates_the_overridden_tasks_again(bootstrapped, tmp_path):
    with FakeJudge(("ok", verdict_reply(True))) as judge:
        output = _bootstrap_with(judge, tmp_path / "again.txt")
    assert "0 approved tasks" in output and "6 validated against the judge" in output
    validations = _latest_validations(bootstrapped.filter(slug__in=[spec.slug for spec in demo_tasks()]))
    assert [(v.status, v.overridden_by) for v in validations] == [(ValidationStatus.PASSED, None)] * 6


def test_running_bootstrap_twice_creates_nothing_more(bootstrapped, tmp_path):
    before = _counts()
    call_command("bootstrap_demo", stdout=open(tmp_path / "again.txt", "w"))
    assert _counts() == before
    assert "0 approved tasks" in (tmp_path / "again.txt").read_text()


def test_demo_world_files_extract_to_previews(bootstrapped):
    for world_file in WorldFile.objects.filter(version__task__in=bootstrapped):
        extracted = world_file_extract(world_file_id=world_file.pk)
        assert extracted.extraction_status == ExtractionStatus.DONE, (
            world_file.path,
            extracted.extraction_error,
        )
        if world_file.kind == "pdf":
            assert extracted.preview["page_count"] == 3
        if world_file.kind == "xlsx":
            formulas = [c for row in extracted.preview["sheets"][0]["rows"] for c in row if "formula" in c]
            assert formulas and all(c["note"].startswith("value not cached") for c in formulas)


def _final_answer(spec, work: Path) -> str:
    if not spec.solution_script:
        return spec.golden_answer
    (work / "solve.py").write_text(spec.solution_script)
    result = subprocess.run(
        [sys.executable, "solve.py"], cwd=work, capture_output=True, text=True, timeout=60, check=True
    )
    return result.stdout


@pytest.mark.parametrize("spec", demo_tasks(), ids=lambda spec: spec.slug)
def test_each_golden_answer_meets_every_deterministic_criterion(spec, tmp_path):
    from rl_engine.bundle import Rubric

    work = tmp_path / "work"
    work.mkdir()
    for path, data in spec.files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_bytes(data)
    answer = _final_answer(spec, work)
    rubric = Rubric.model_validate(
        {
            "criteria": [
                {"id": f"c{i}", "text": text, "kind": kind, "params": params, "required": required}
                for i, (text, kind, params, required) in enumerate(spec.criteria, start=1)
                if kind != "llm_judge"
            ]
        }
    )
    result = asyncio.run(grade(rubric, final_answer=answer, output_dir=work / "output", judge=None))
    unmet = [(v.text, v.rationale) for v in result.verdicts if not v.met]
    assert not unmet
    assert result.score == 1.0 and result.passed


def test_exported_demo_bundles_load_with_the_engine_loader_and_keep_their_hash(bootstrapped, tmp_path):
    versions = [task.latest_version for task in bootstrapped]
    zip_path = bundle_export(versions=versions)
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(tmp_path / "unzipped")
    zip_path.unlink()
    hashes = {v.task.slug: v.content_hash for v in versions}
    for slug, content_hash in hashes.items():
        bundle = load_bundle(tmp_path / "unzipped" / slug)
        assert bundle.content_hash == content_hash
        assert not bundle.declared_hash_mismatch
        assert (tmp_path / "unzipped" / slug / "tests" / "test.sh").is_file()
    shutil.rmtree(tmp_path / "unzipped")
