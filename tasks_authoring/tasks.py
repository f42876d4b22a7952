"""Celery tasks: thin adapters that take ids and call one service."""

from celery import shared_task

from .models import ExportJob
from .services.export_jobs import export_job_run, exports_expire
from .services.world import world_file_extract


@shared_task(name="tasks_authoring.extract_world_file", acks_late=True, max_retries=0)
def extract_world_file(world_file_id: int) -> str:
    world_file = world_file_extract(world_file_id=world_file_id)
    return "deleted" if world_file is None else world_file.extraction_status


@shared_task(name="tasks_authoring.run_export_job", acks_late=True, max_retries=0)
def run_export_job(export_job_id: int) -> str:
    job = export_job_run(export_job_id=export_job_id)
    return "deleted" if job is None else job.status


@shared_task(name="tasks_authoring.export_jobs_expire")
def export_jobs_expire() -> int:
    return exports_expire(ExportJob)
