"""Builders for the data-layer tests: real files made by other libraries, drafts ready to submit."""

from __future__ import annotations

import io
import json
from email.message import EmailMessage

from tasks_authoring import services
from tests.runs.validation_helpers import validation_finished


def pdf_bytes(pages: list[str]) -> bytes:
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfgen import canvas

    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer, pagesize=A4, invariant=1)
    for text in pages:
        pdf.drawString(72, 750, text)
        pdf.showPage()
    pdf.save()
    return buffer.getvalue()


def xlsx_bytes() -> bytes:
    from openpyxl import Workbook

    book = Workbook()
    sheet = book.active
    sheet.title = "Model"
    sheet.append(["Item", "Value"])
    sheet.append(["Revenue", 120])
    sheet.append(["Cost", 45])
    sheet.append(["Profit", "=B2-B3"])
    book.create_sheet("Notes").append(["written by openpyxl"])
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


def eml_bytes(subject: str = "Q3 numbers", attachment: bytes | None = None) -> bytes:
    message = EmailMessage()
    message["From"] = "Ana <ana@example.org>"
    message["To"] = "Ben <ben@example.org>"
    message["Subject"] = subject
    message["Date"] = "Tue, 01 Oct 2024 09:00:00 +0000"
    message.set_content("Revenue was 120 in Q3.\n")
    if attachment is not None:
        message.add_attachment(attachment, maintype="text", subtype="csv", filename="q3.csv")
    return bytes(message)


def chat_bytes() -> bytes:
    return json.dumps(
        {
            "channel": "deal-team",
            "messages": [
                {"author": "Ana", "timestamp": "2024-10-01T09:00:00Z", "text": "Numbers are in."},
                {"author": "Ben", "timestamp": "2024-10-01T09:05:00Z", "text": "Thanks!"},
            ],
        }
    ).encode()


def draft_with_rubric(expert, *, title: str = "Revenue question", files: dict[str, bytes] | None = None):
    """A draft task (version 1) with an instruction, files and two criteria: ready to submit."""
    task = services.task_create(
        owner=expert, title=title, domain="finance", instruction="What was Q3 revenue?"
    )
    version = task.latest_version
    for path, data in (files if files is not None else {"notes.txt": b"Q3 revenue was 120.\n"}).items():
        services.world_file_upload(version=version, user=expert, path=path, uploaded=io.BytesIO(data))
    services.criterion_create(
        version=version,
        user=expert,
        text="States revenue of 120",
        kind="number_close",
        params={"value": 120},
        required=True,
    )
    services.criterion_create(version=version, user=expert, text="Cites the notes", kind="llm_judge")
    services.task_version_update(version=version, user=expert, golden_answer="Q3 revenue was 120.")
    return task


def approve(task, expert, reviewer):
    version = task.latest_version
    services.task_version_submit(version=version, user=expert)
    validation_finished(version)
    services.review_decide(version=version, reviewer=reviewer, decision="approve")
    version.refresh_from_db()
    return version
