import shutil
import zipfile
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from tasks_authoring.bundles import bundle_export, task_set_export
from tasks_authoring.models import TaskSet, TaskVersion, VersionState


class Command(BaseCommand):
    help = (
        "Export approved task versions (a task set, or every approved latest version) as Harbor task folders."
    )

    def add_arguments(self, parser):
        parser.add_argument("destination", help="a folder (created) or a path ending in .zip")
        parser.add_argument(
            "--task-set", help="name of the task set to export (default: every approved task)"
        )

    def handle(self, *args, destination, task_set=None, **options):
        if task_set:
            found = TaskSet.objects.filter(name=task_set).first()
            if found is None:
                names = ", ".join(TaskSet.objects.values_list("name", flat=True)) or "none"
                raise CommandError(f"no task set named {task_set!r}; task sets: {names}")
            zip_path = task_set_export(task_set=found)
        else:
            versions = list(
                TaskVersion.objects.filter(state=VersionState.APPROVED)
                .select_related("task")
                .order_by("task__slug")
            )
            if not versions:
                raise CommandError("no approved task version to export")
            zip_path = bundle_export(versions=versions)
        target = Path(destination)
        if target.suffix == ".zip":
            shutil.move(zip_path, target)
            self.stdout.write(f"wrote {target}")
            return
        target.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(zip_path) as archive:
            archive.extractall(target)
        zip_path.unlink()
        count = sum(1 for child in target.iterdir() if (child / "task.toml").exists())
        self.stdout.write(f"wrote {count} task folder(s) to {target}")
