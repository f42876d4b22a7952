"""`manage.py export_tasks` writes Harbor task folders that rl_engine loads with the same content hash."""

import io

import pytest
from django.core.management import CommandError, call_command

from rl_engine.bundle import load_bundle
from tasks_authoring.demo import DEMO_TASK_SET
from tasks_authoring.models import TaskVersion, VersionState

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    call_command("bootstrap_demo", stdout=io.StringIO())


def test_it_exports_the_demo_task_set_as_folders_that_load(demo, tmp_path):
    target = tmp_path / "tasks"
    call_command("export_tasks", str(target), task_set=DEMO_TASK_SET, stdout=io.StringIO())
    folders = sorted(p for p in target.iterdir() if (p / "task.toml").exists())
    members = TaskVersion.objects.filter(
        state=VersionState.APPROVED, task_set_memberships__task_set__name=DEMO_TASK_SET
    )
    hashes = {v.task.slug: v.content_hash for v in members}
    assert len(folders) == len(hashes) >= 6
    for folder in folders:
        assert load_bundle(folder).content_hash == hashes[folder.name]
    assert (target / "task_set.json").exists()


def test_it_writes_a_zip_when_asked(demo, tmp_path):
    call_command("export_tasks", str(tmp_path / "all.zip"), stdout=io.StringIO())
    assert (tmp_path / "all.zip").stat().st_size > 10_000


def test_an_unknown_task_set_is_named_with_the_known_ones(demo, tmp_path):
    with pytest.raises(CommandError, match=f"no task set named 'nope'; task sets: .*{DEMO_TASK_SET}"):
        call_command("export_tasks", str(tmp_path / "x"), task_set="nope")
