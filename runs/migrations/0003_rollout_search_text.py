"""RolloutBody.search_text: what the trace list's text search matches, filled for stored rollouts,
and on PostgreSQL a pg_trgm GIN index on it so `LIKE '%words%'` stays fast on a million rollouts."""

from django.db import migrations, models

INDEX = "runs_rolloutbody_search_trgm"


def fill_search_text(apps, schema_editor):
    from runs.search_text import search_text_of

    body_model = apps.get_model("runs", "RolloutBody")
    bodies = body_model.objects.filter(search_text="").select_related("rollout")
    batch = []
    for body in bodies.iterator(chunk_size=500):
        body.search_text = search_text_of(
            turns=body.turns,
            final_answer=body.final_answer,
            message=body.rollout.message,
            error_detail=body.error_detail,
        )
        batch.append(body)
        if len(batch) == 500:
            body_model.objects.bulk_update(batch, ["search_text"])
            batch = []
    body_model.objects.bulk_update(batch, ["search_text"])


def create_trigram_index(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return  # SQLite scans; the embedded default holds demo-sized runs
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    schema_editor.execute(
        f"CREATE INDEX IF NOT EXISTS {INDEX} ON runs_rolloutbody USING gin (search_text gin_trgm_ops)"
    )


def drop_trigram_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    dependencies = [("runs", "0002_labels_and_trace_exports")]

    operations = [
        migrations.AddField(
            model_name="rolloutbody",
            name="search_text",
            field=models.TextField(blank=True, default=""),
        ),
        migrations.RunPython(fill_search_text, migrations.RunPython.noop),
        migrations.RunPython(create_trigram_index, drop_trigram_index),
    ]
