import time

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand

from runs.demo import TOY_TASK_SET, judge_section, toy_model_ensure, toy_task_set_ensure
from runs.demo_reviews import demo_reviews_ensure
from tasks_authoring.demo import DemoJudge, demo_content_ensure
from webapp.demo import demo_users_ensure
from webapp.devstack import judge_answers


class Command(BaseCommand):
    help = (
        "Create the demo users and content (the knowledge-work tasks, validated against the llm_judge "
        "endpoint when one answers, the toy task set and the toy model); safe to run again (creates only "
        "what is missing)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--judge-url",
            default=None,
            help="the llm_judge endpoint that validates the demo tasks (default: PRACTICUM_JUDGE_URL)",
        )

    def handle(self, *args, **options):
        credentials_file = settings.VAR_DIR / "demo-users.txt"
        created = demo_users_ensure(credentials_file=credentials_file)
        if created:
            self.stdout.write(f"Demo users (shown once; also saved in {credentials_file}):")
            for username, password in created.items():
                self.stdout.write(f"  {username:<11} {password}")
        else:
            self.stdout.write(f"Demo users already exist; their passwords are in {credentials_file}")
        users = {name: User.objects.get(username=name) for name in ("expert", "reviewer", "researcher")}
        judge_url = options["judge_url"] or settings.PRACTICUM_JUDGE_URL
        judge = DemoJudge(section=judge_section(judge_url), reachable=judge_answers(judge_url))
        if not judge.reachable:
            self.stdout.write(
                f"No llm_judge endpoint answers at {judge_url}: a demo task that fails its validation for "
                "want of it is approved by the demo admin's override, which says so (manage.py run_demo "
                "starts the local judge first and validates them for real)."
            )
        began = time.monotonic()
        # Without a judge, the admin overrides a validation that fails (tasks_authoring/demo.py).
        created_content = demo_content_ensure(**users, judge=judge, admin=User.objects.get(username="admin"))
        summary = (
            f"Demo content: {created_content['tasks']} approved tasks and "
            f"{created_content['task_sets']} task set created now (existing ones are kept)"
        )
        validated = created_content["tasks"] + created_content["revalidated"]
        if validated:
            how = f"against the judge at {judge_url}" if judge.reachable else "without a judge"
            summary += f"; {validated} validated {how} in {time.monotonic() - began:.0f} s"
        self.stdout.write(summary)
        toy = toy_task_set_ensure(**users)
        model = toy_model_ensure()
        self.stdout.write(
            f"Toy content: the task set {TOY_TASK_SET!r} ({toy.members.count()} tasks), the toy model in {model}"
        )
        reviews = demo_reviews_ensure()
        if reviews:
            self.stdout.write(f"Demo criterion reviews: {reviews} added by the demo reviewer (grader health)")
