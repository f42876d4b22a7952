from django.db import migrations

DOMAINS = [
    ("finance", "Finance"),
    ("law", "Law"),
    ("consulting", "Consulting"),
    ("accounting", "Accounting"),
    ("medicine", "Medicine"),
    ("engineering", "Engineering"),
]


def seed_domains(apps, schema_editor):
    Domain = apps.get_model("tasks_authoring", "Domain")
    for slug, name in DOMAINS:
        Domain.objects.get_or_create(slug=slug, defaults={"name": name})


def unseed_domains(apps, schema_editor):
    Domain = apps.get_model("tasks_authoring", "Domain")
    Domain.objects.filter(slug__in=[slug for slug, _ in DOMAINS], tasks__isnull=True).delete()


class Migration(migrations.Migration):
    dependencies = [("tasks_authoring", "0001_initial")]

    operations = [migrations.RunPython(seed_domains, unseed_domains)]
