import os
import signal
import threading

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from webapp.devstack import DevStack


def _interrupt(_signum, _frame):
    raise KeyboardInterrupt


class Command(BaseCommand):
    help = (
        "Migrate, start the local judge, create the demo content (validated against that judge), run Ray, a "
        "Celery worker (with beat) and the web server until Ctrl-C; on the first start, launch the demo's "
        "evaluation and training runs, and seed the demo reviewer's criterion reviews once the evaluation ends."
    )

    def add_arguments(self, parser):
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--ray-port", type=int, default=int(os.environ.get("RAY_HEAD_PORT", "6390")))
        parser.add_argument(
            "--ray-dashboard-port", type=int, default=int(os.environ.get("RAY_DASHBOARD_PORT", "8265"))
        )
        parser.add_argument("--ray-cpus", type=int, default=int(os.environ.get("RAY_NUM_CPUS", "2")))
        parser.add_argument(
            "--judge-port",
            type=int,
            default=int(os.environ.get("JUDGE_PORT", "8790")),
            help="port of the local llm_judge server; 0 starts none",
        )
        parser.add_argument("--no-demo-runs", action="store_true", help="do not launch the demo runs")

    def handle(self, *args, **options):
        call_command("migrate", interactive=False, verbosity=0)
        stack = DevStack(
            base_dir=settings.BASE_DIR,
            var_dir=settings.VAR_DIR,
            host=options["host"],
            port=options["port"],
            ray_port=options["ray_port"],
            ray_dashboard_port=options["ray_dashboard_port"],
            ray_cpus=options["ray_cpus"],
            judge_port=options["judge_port"] or None,
        )
        # SIGTERM is treated like Ctrl-C so a supervisor (or a test) stops everything the same way.
        signal.signal(signal.SIGTERM, _interrupt)
        exited = None
        try:
            # The judge first, so that set-up validates the demo tasks' llm_judge criteria for real.
            stack.start_judge(on_status=lambda line: self.stdout.write(line))
            call_command("bootstrap_demo", **({"judge_url": stack.judge_url} if stack.judge_port else {}))
            stack.start(on_status=lambda line: self.stdout.write(line))
            if not options["no_demo_runs"]:
                self._launch_demo_runs(stack)
            self._seed_reviews_when_the_evaluation_ends()
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

    def _launch_demo_runs(self, stack: DevStack) -> None:
        """First start only: an oracle evaluation and a short training run, executed in the background on Ray."""
        from django.contrib.auth.models import User

        from runs.demo import demo_runs_ensure

        judge_url = stack.judge_url if stack.judge_port else None
        for run in demo_runs_ensure(researcher=User.objects.get(username="researcher"), judge_url=judge_url):
            self.stdout.write(f"launched the demo run {run.name!r} (it runs in the background)")

    def _seed_reviews_when_the_evaluation_ends(self) -> None:
        """The demo reviewer's criterion reviews need the demo evaluation's rollouts: a daemon thread waits
        for that run to end and seeds them, so the start is not held up (bootstrap_demo seeds them on a
        later start when the run had already ended)."""
        from runs.demo_reviews import demo_eval_run
        from runs.models import FINAL_STATUSES

        run = demo_eval_run()
        if run is not None and run.status not in FINAL_STATUSES:
            threading.Thread(target=self._seed_reviews, name="demo-reviews", daemon=True).start()

    def _seed_reviews(self) -> None:
        from runs.demo_reviews import demo_reviews_when_eval_ends

        try:
            added = demo_reviews_when_eval_ends()
            if added:
                self.stdout.write(
                    f"the demo reviewer reviewed {added} criterion verdicts (see /quality/grader/)"
                )
        except Exception as error:  # a demo nicety must not stop the stack, but says why it is missing
            self.stderr.write(f"the demo criterion reviews were not seeded: {type(error).__name__}: {error}")
        finally:
            connection.close()
