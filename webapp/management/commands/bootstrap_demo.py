from django.conf import settings
from django.core.management.base import BaseCommand

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
