from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError

from tasks_authoring.bundles import bundle_import


class Command(BaseCommand):
    help = "Import Harbor-compatible task folders from a zip or a folder; prints one line per task."

    def add_arguments(self, parser):
        parser.add_argument("path", help="a .zip of task folders, or a folder")
        parser.add_argument(
            "--owner", help="username that will own the imported tasks (default: the only superuser)"
        )

    def handle(self, *args, path, owner=None, **options):
        user = self._owner(owner)
        report = bundle_import(user=user, zip_path=path)
        for line in report.lines:
            where = f" → {line.task.slug} v{line.version.number}" if line.version is not None else ""
            self.stdout.write(f"{line.status:<9} {line.name}{where}: {line.reason}")
        self.stdout.write(report.summary())
        if report.refused:
            raise CommandError(f"{len(report.refused)} of {len(report.lines)} refused")

    def _owner(self, username: str | None) -> User:
        if username:
            user = User.objects.filter(username=username).first()
            if user is None:
                raise CommandError(f"no user named {username!r}")
            return user
        admins = list(User.objects.filter(is_superuser=True, is_active=True)[:2])
        if len(admins) != 1:
            raise CommandError("say who owns the imported tasks with --owner USERNAME")
        return admins[0]
