"""The search text moves from RolloutBody to its own table, written after ingestion commits.

Its trigram index was most of the database's cost of storing a rollout; apart, ingestion writes only
the summary and the body, and a Celery task adds the text (runs/services/search_index.py)."""

import django.db.models.deletion
from django.db import migrations, models

OLD_INDEX = "runs_rolloutbody_search_trgm"
INDEX = "runs_rolloutsearchtext_trgm"


def copy_search_text(apps, schema_editor):
    schema_editor.execute(
        "INSERT INTO runs_rolloutsearchtext (rollout_id, text) "
        "SELECT rollout_id, search_text FROM runs_rolloutbody"
    )


def copy_search_text_back(apps, schema_editor):
    schema_editor.execute(
        "UPDATE runs_rolloutbody SET search_text = COALESCE((SELECT text FROM runs_rolloutsearchtext "
        "WHERE runs_rolloutsearchtext.rollout_id = runs_rolloutbody.rollout_id), '')"
    )


def move_trigram_index(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return  # SQLite scans; the embedded default holds demo-sized runs
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    schema_editor.execute(f"DROP INDEX IF EXISTS {OLD_INDEX}")
    schema_editor.execute(
        f"CREATE INDEX IF NOT EXISTS {INDEX} ON runs_rolloutsearchtext USING gin (text gin_trgm_ops)"
    )


def move_trigram_index_back(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")
    schema_editor.execute(
        f"CREATE INDEX IF NOT EXISTS {OLD_INDEX} ON runs_rolloutbody USING gin (search_text gin_trgm_ops)"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0007_rollout_task_tallies"),
    ]

    operations = [
        migrations.CreateModel(
            name="RolloutSearchText",
            fields=[
                (
                    "rollout",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="search",
                        serialize=False,
                        to="runs.rollout",
                    ),
                ),
                ("text", models.TextField(blank=True)),
            ],
        ),
        migrations.RunPython(copy_search_text, copy_search_text_back),
        migrations.RunPython(move_trigram_index, move_trigram_index_back),
        migrations.RemoveField(
            model_name="rolloutbody",
            name="search_text",
        ),
    ]
