import os
import signal

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from webapp.devstack import DevStack


def _interrupt(_signum, _frame):
    raise KeyboardInterrupt


class Command(BaseCommand):
    help = "Migrate, create the demo content, and run Ray, a Celery worker and the web server until Ctrl-C."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--ray-port", type=int, default=int(os.environ.get("RAY_HEAD_PORT", "6390")))
        parser.add_argument(
            "--ray-dashboard-port", type=int, default=int(os.environ.get("RAY_DASHBOARD_PORT", "8265"))
        )
        parser.add_argument("--ray-cpus", type=int, default=int(os.environ.get("RAY_NUM_CPUS", "2")))

    def handle(self, *args, **options):
        call_command("migrate", interactive=False, verbosity=0)
        call_command("bootstrap_demo")
        stack = DevStack(
            base_dir=settings.BASE_DIR,
            var_dir=settings.VAR_DIR,
            host=options["host"],
            port=options["port"],
            ray_port=options["ray_port"],
            ray_dashboard_port=options["ray_dashboard_port"],
            ray_cpus=options["ray_cpus"],
        )
        # SIGTERM is treated like Ctrl-C so a supervisor (or a test) stops everything the same way.
        signal.signal(signal.SIGTERM, _interrupt)
        exited = None
        try:
            stack.start(on_status=lambda line: self.stdout.write(line))
            self.stdout.write(self.style.SUCCESS(f"Practicum is running at {stack.url}  (Ctrl-C stops it)"))
            self.stdout.write(f"Logs: {settings.VAR_DIR / 'logs'}")
            exited = stack.wait()
        except KeyboardInterrupt:
            self.stdout.write("stopping ...")
        finally:
            stack.stop()
            self.stdout.write("stopped.")
        if exited is not None:
            raise CommandError(
                f"{exited.name} exited with code {exited.process.returncode}; see {exited.log_path}"
            )
