"""Builders for the view tests: real tasks made through the services, and files made in the test."""

from __future__ import annotations

import io

from django.core.files.uploadedfile import SimpleUploadedFile

from tasks_authoring import services
from tasks_authoring.models import Task, TaskVersion, WorldFile
from tests.runs.validation_helpers import validation_finished


def pdf_bytes(pages: list[str]) -> bytes:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    buffer = io.BytesIO()
    document = canvas.Canvas(buffer, pagesize=A4)
    for text in pages:
        document.drawString(72, 760, text)
        document.showPage()
    document.save()
    return buffer.getvalue()


def workbook_bytes() -> bytes:
    from openpyxl import Workbook

    workbook = Workbook()
    sheet = workbook.active
    sheet.title = "Revenue"
    sheet.append(["Region", "2023", "2024"])
    sheet.append(["APAC", 100, 112.5])
    sheet.append(["EMEA", 80, 84])
    sheet["D2"] = "=C2/B2-1"
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


def upload(version: TaskVersion, user, path: str, content: bytes, *, extract: bool = True) -> WorldFile:
    world_file = services.world_file_upload(
        version=version, user=user, path=path, uploaded=SimpleUploadedFile(path.rsplit("/", 1)[-1], content)
    )
    if extract:
        services.world_file_extract(world_file_id=world_file.pk)
        world_file.refresh_from_db()
    return world_file


def draft_task(
    owner, *, title: str = "APAC growth check", domain: str = "finance", criteria: int = 1
) -> Task:
    """A draft with an instruction, one text file and `criteria` criteria (c1 primary, required)."""
    task = services.task_create(
        owner=owner, title=title, domain=domain, instruction="Compute the **adjusted** APAC growth."
    )
    version = task.latest_version
    services.task_version_update(version=version, user=owner, golden_answer="12.5%")
    upload(version, owner, "notes/readme.txt", b"Revenue grew in APAC.\n")
    for number in range(criteria):
        services.criterion_create(
            version=version,
            user=owner,
            text=f"States fact {number + 1}",
            kind="contains",
            params={"value": f"fact {number + 1}"},
            weight=1.0,
            required=number == 0,
        )
    return task


def in_review_task(owner, **kwargs) -> Task:
    task = draft_task(owner, **kwargs)
    services.task_version_submit(version=task.latest_version, user=owner)
    task.refresh_from_db()
    return task


def approved_task(owner, reviewer, **kwargs) -> Task:
    task = in_review_task(owner, **kwargs)
    validation_finished(task.latest_version)
    services.review_decide(version=task.latest_version, reviewer=reviewer, decision="approve", comment="")
    task.refresh_from_db()
    return task
