"""(run, id) on Rollout: the trace list of one run, newest first, walks this index instead of the whole
primary key. The foreign key's own index on run alone goes: every (run, ...) index serves `run = X`."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("runs", "0004_reconciler_memory")]

    operations = [
        migrations.AddIndex(
            model_name="rollout",
            index=models.Index(fields=["run", "id"], name="runs_rollou_run_id_734657_idx"),
        ),
        migrations.AlterField(
            model_name="rollout",
            name="run",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="rollouts",
                to="runs.run",
            ),
        ),
    ]
