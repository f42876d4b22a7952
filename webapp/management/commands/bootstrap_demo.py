from django.conf import settings
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand

from tasks_authoring.demo import demo_content_ensure
from webapp.demo import demo_users_ensure


class Command(BaseCommand):
    help = "Create the demo users and content; safe to run again (creates only what is missing)."

    def handle(self, *args, **options):
        credentials_file = settings.VAR_DIR / "demo-users.txt"
        created = demo_users_ensure(credentials_file=credentials_file)
        if created:
            self.stdout.write(f"Demo users (shown once; also saved in {credentials_file}):")
            for username, password in created.items():
                self.stdout.write(f"  {username:<11} {password}")
        else:
            self.stdout.write(f"Demo users already exist; their passwords are in {credentials_file}")
        created_content = demo_content_ensure(
            expert=User.objects.get(username="expert"),
            reviewer=User.objects.get(username="reviewer"),
            researcher=User.objects.get(username="researcher"),
        )
        self.stdout.write(
            f"Demo content: {created_content['tasks']} approved tasks and "
            f"{created_content['task_sets']} task set created now (existing ones are kept)"
        )
