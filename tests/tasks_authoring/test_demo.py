"""The demo content: idempotent bootstrap, golden answers that meet their deterministic criteria,
and exported demo bundles that load with rl_engine's loader."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from django.core.management import call_command

from rl_engine.bundle import load_bundle
from rl_engine.grading import grade
from rl_engine.grading.checks import DETERMINISTIC_KINDS
from tasks_authoring.bundles import bundle_export
from tasks_authoring.demo import DEMO_SEED, DEMO_TASK_SET
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
from tasks_authoring.services import world_file_extract

pytestmark = pytest.mark.django_db


@pytest.fixture
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


@pytest.fixture
def bootstrapped(media, settings, tmp_path):
    settings.VAR_DIR = tmp_path
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
