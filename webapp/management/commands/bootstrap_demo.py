from django.conf import settings
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand

from runs.demo import TOY_TASK_SET, toy_model_ensure, toy_task_set_ensure
from tasks_authoring.demo import demo_content_ensure
from webapp.demo import demo_users_ensure


class Command(BaseCommand):
    help = (
        "Create the demo users and content (the knowledge-work tasks, the toy task set and the toy model); "
        "safe to run again (creates only what is missing)."
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
        # The admin overrides a validation that fails only for want of the judge (tasks_authoring/demo.py).
        created_content = demo_content_ensure(**users, admin=User.objects.get(username="admin"))
        self.stdout.write(
            f"Demo content: {created_content['tasks']} approved tasks and "
            f"{created_content['task_sets']} task set created now (existing ones are kept)"
        )
        toy = toy_task_set_ensure(**users)
        model = toy_model_ensure()
        self.stdout.write(
            f"Toy content: the task set {TOY_TASK_SET!r} ({toy.members.count()} tasks), the toy model in {model}"
        )
