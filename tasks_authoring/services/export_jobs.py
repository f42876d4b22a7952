"""Exports asked for in the browser: a job row, enqueued after the commit, run by a Celery worker.

The worker calls the bundle export service and counts each task folder it writes, so the page can show
progress; the finished zip moves into storage, where only the job's owner (or an admin) downloads it.
Files are kept EXPORT_RETENTION_DAYS after they were written, then deleted by `exports_expire` (Celery
beat, for these and for the runs app's trace exports); the row stays, marked expired.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.core.files import File
from django.core.files.storage import default_storage
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from ..bundles import bundle_export, task_set_export
from ..errors import AuthoringError, NotAllowed
from ..models import ExportJob, ExportProgress, ExportStatus, TaskSet, TaskVersion, VersionState
from ..permissions import can_view_task, can_view_task_sets

logger = logging.getLogger(__name__)


def _enqueue(job: ExportJob) -> None:
    from ..tasks import run_export_job

    job_id = job.pk
    transaction.on_commit(lambda: run_export_job.delay(job_id))


@transaction.atomic
def export_job_create(
    *, user, version: TaskVersion | None = None, task_set: TaskSet | None = None
) -> ExportJob:
    """Queues the export of one approved version or of a whole task set; the zip is written by a worker."""
    if (version is None) == (task_set is None):
        raise AuthoringError("export either one version or one task set")
    if version is not None:
        if not can_view_task(user, version.task):
            raise NotAllowed("you cannot see this task, so you cannot export it")
        if version.state != VersionState.APPROVED:
            raise AuthoringError(
                f"only approved versions export; {version.task.slug} v{version.number} is "
                f"{version.get_state_display().lower()}"
            )
        job = ExportJob.objects.create(
            owner=user,
            version=version,
            label=f"{version.task.title} (version {version.number})",
            filename=f"{version.task.slug}-v{version.number}.zip",
            total=1,
        )
    else:
        if not can_view_task_sets(user):
            raise NotAllowed("only researchers, reviewers and admins export task sets")
        members = task_set.members.count()
        if not members:
            raise AuthoringError(f"the task set {task_set.name!r} has no members to export")
        job = ExportJob.objects.create(
            owner=user,
            task_set=task_set,
            label=f"task set {task_set.name}",
            filename=f"task-set-{slugify(task_set.name)[:80] or task_set.pk}.zip",
            total=members,
        )
    _enqueue(job)
    return job


def export_job_run(*, export_job_id: int) -> ExportJob | None:
    """Writes the zip, updating `done` after each task folder; a failure is kept with its reason."""
    # A job still "running" is claimed again: with late acks the broker redelivers a message only
    # when the worker that held it died, and exporting again is harmless.
    claimed = ExportJob.objects.filter(
        pk=export_job_id, status__in=[ExportStatus.QUEUED, ExportStatus.RUNNING]
    ).update(status=ExportStatus.RUNNING, done=0)
    job = ExportJob.objects.select_related("version__task", "task_set").filter(pk=export_job_id).first()
    if not claimed:
        return job  # gone, or already finished by an earlier delivery of the same message

    def progress(done: int, total: int) -> None:
        ExportJob.objects.filter(pk=export_job_id).update(done=done, total=total)

    try:
        if job.version is not None:
            zip_path = bundle_export(versions=[job.version], progress=progress)
        elif job.task_set is not None:
            zip_path = task_set_export(task_set=job.task_set, progress=progress)
        else:
            raise AuthoringError("what this job exported was deleted before the export ran")
        try:
            with zip_path.open("rb") as handle:
                job.file.save(job.filename, File(handle), save=False)
        finally:
            zip_path.unlink(missing_ok=True)
    except Exception as exc:
        # Any failure must end the job, or its page would poll forever; the reason is shown as is.
        reason = str(exc)
        if not isinstance(exc, AuthoringError):
            logger.exception("export job %s failed", export_job_id)
            reason = f"{type(exc).__name__}: {exc}"
        ExportJob.objects.filter(pk=export_job_id).update(
            status=ExportStatus.FAILED, error=reason, finished_at=timezone.now()
        )
    else:
        ExportJob.objects.filter(pk=export_job_id).update(
            status=ExportStatus.DONE, file=job.file.name, finished_at=timezone.now()
        )
    job.refresh_from_db()
    return job


EXPIRE_BATCH = 500


def exports_expire(model: type[ExportProgress], *, now: datetime | None = None) -> int:
    """Deletes the files of `model`'s exports that finished more than EXPORT_RETENTION_DAYS ago and marks
    them expired; returns how many. 0 days keeps every file. Each row is marked before its file is
    deleted, so a crash in between leaves an orphan file, never a "done" export without its file."""
    days = settings.EXPORT_RETENTION_DAYS
    if days <= 0:
        return 0
    cutoff = (now or timezone.now()) - timedelta(days=days)
    stale = model.objects.filter(status=ExportStatus.DONE, finished_at__lt=cutoff).order_by("pk")
    expired = 0
    while batch := list(stale.values_list("pk", "file")[:EXPIRE_BATCH]):
        pks = [pk for pk, _ in batch]
        model.objects.filter(pk__in=pks, status=ExportStatus.DONE).update(
            status=ExportStatus.EXPIRED, file=""
        )
        for _, name in batch:
            if name:
                default_storage.delete(name)
        expired += len(batch)
    return expired


def export_expired_message(export: ExportProgress) -> str:
    written = f" written {export.finished_at:%Y-%m-%d %H:%M}" if export.finished_at else ""
    return (
        f"This export's file{written} was deleted: files are kept {settings.EXPORT_RETENTION_DAYS} days "
        "(EXPORT_RETENTION_DAYS). Export again for a fresh one."
    )
