"""A small real world for sandbox and tool tests: PDFs, workbooks, CSV, chat logs, e-mail."""

import json
import mailbox
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path

import openpyxl
from reportlab.pdfgen import canvas

from rl_engine.tool_names import ALL_TOOLS


@dataclass
class WorldBundle:
    """The two things a sandbox reads from a TaskBundle."""

    world_dir: Path
    tools: list[str] = field(default_factory=lambda: list(ALL_TOOLS))

    def enabled_tools(self) -> list[str]:
        return list(self.tools)


def _pdf(path: Path, pages: list[list[str]], title: str) -> None:
    pdf = canvas.Canvas(str(path))
    pdf.setTitle(title)
    pdf.setAuthor("Finance team")
    for lines in pages:
        for row, line in enumerate(lines):
            pdf.drawString(72, 760 - 18 * row, line)
        pdf.showPage()
    pdf.save()


def _email(sender: str, to: str, subject: str, date: str, body: str, attachment: bytes | None = None):
    message = EmailMessage()
    message["From"], message["To"], message["Subject"], message["Date"] = sender, to, subject, date
    message["Message-ID"] = f"<{abs(hash(subject))}@example.org>"
    message.set_content(body)
    if attachment is not None:
        message.add_attachment(attachment, maintype="text", subtype="csv", filename="numbers.csv")
    return message


def make_world(root: Path) -> Path:
    world = root / "world"
    for folder in ("docs", "data", "chat/general", "mail"):
        (world / folder).mkdir(parents=True, exist_ok=True)
    (world / "docs" / "readme.txt").write_text("Quarterly review\nAPAC growth was 12.5%\nEMEA flat\n")
    _pdf(
        world / "docs" / "report.pdf",
        [["Revenue overview", "Total revenue 4.2m"], ["APAC growth 12.5%"]],
        "Q3",
    )

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Sales"
    sheet.append(["Region", "Q1", "Q2"])
    sheet.append(["APAC", 100, 112.5])
    sheet.append(["EMEA", 80, 80])
    sheet["D1"] = "Total"
    sheet["D2"] = "=B2+C2"  # written by a library: no cached value
    book.create_sheet("Notes")["A1"] = "draft"
    book.save(world / "data" / "sales.xlsx")
    (world / "data" / "targets.csv").write_text("region,target\nAPAC,10\nEMEA,5\n")

    slack_day = [
        {"user": "ana", "ts": "1709283600.000100", "text": "APAC target is 10%"},
        {"user": {"real_name": "Bo Li"}, "ts": "1709290800.000200", "text": "EMEA numbers are late"},
    ]
    (world / "chat" / "general" / "2024-03-01.json").write_text(json.dumps(slack_day))
    (world / "chat" / "deals.jsonl").write_text(
        "\n".join(
            json.dumps(m)
            for m in (
                {
                    "channel": "deals",
                    "author": "carol",
                    "timestamp": "2024-03-02T10:00:00Z",
                    "text": "Signed ACME",
                },
                {
                    "channel": "deals",
                    "author": "dan",
                    "timestamp": "2024-03-05T09:00:00Z",
                    "text": "Lost Initech",
                },
            )
        )
    )

    (world / "mail" / "board.eml").write_bytes(
        bytes(
            _email(
                "cfo@example.org",
                "board@example.org",
                "Q3 numbers",
                "Mon, 04 Mar 2024 09:00:00 +0000",
                "APAC grew 12.5%.",
                b"a,b\n1,2\n",
            )
        )
    )
    box = mailbox.mbox(world / "mail" / "inbox.mbox")
    box.add(
        _email(
            "ana@example.org", "cfo@example.org", "Hiring", "Tue, 05 Mar 2024 10:00:00 +0000", "Two hires."
        )
    )
    box.add(
        _email(
            "bo@example.org", "cfo@example.org", "Travel", "Wed, 06 Mar 2024 10:00:00 +0000", "Tokyo trip."
        )
    )
    box.flush()
    box.close()
    return world
