"""Chat-log and e-mail tools over JSON / JSONL chat exports, .eml files and an .mbox mailbox."""

import json

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from rl_engine.mcp_server.tools_messages import (
    list_chat_channels,
    list_emails,
    read_chat,
    read_email,
    search_emails,
)
from rl_engine.mcp_server.workspace import ServerSettings, Workspace
from tests.rl_engine.sandbox_world import make_world


@pytest.fixture
def ws(tmp_path) -> Workspace:
    workspace = Workspace()
    workspace.configure(make_world(tmp_path), ServerSettings())
    return workspace


def test_channels_come_from_fields_or_slack_export_folders(ws):
    channels = list_chat_channels(ws)
    assert "#deals\t2 messages\t2024-03-02 to 2024-03-05\tpeople: carol, dan" in channels
    assert "#general\t2 messages" in channels and "Bo Li" in channels


def test_read_chat_filters_by_channel_author_time_and_text(ws):
    assert "Signed ACME" in read_chat(ws, channel="#deals", until="2024-03-03")
    assert "Lost Initech" not in read_chat(ws, channel="deals", until="2024-03-03")
    assert "[1 of 1 matching" in read_chat(ws, author="bo", query="late")
    assert "[0 of 0" in read_chat(ws, since="2025-01-01")
    with pytest.raises(ToolError, match="channels are: deals, general"):
        read_chat(ws, channel="random")
    with pytest.raises(ToolError, match="not a date"):
        read_chat(ws, since="last tuesday")


def test_other_chat_shapes_are_understood(ws):
    (ws.root / "chat" / "team.json").write_text(
        json.dumps(
            {
                "channels": [
                    {
                        "name": "ops",
                        "messages": [{"sender": "eve", "time": "2024-04-01 08:00", "message": "Deploy"}],
                    }
                ]
            }
        )
    )
    assert "#ops eve: Deploy" in read_chat(ws, channel="ops")


def test_list_emails_covers_eml_files_and_mbox_messages(ws):
    listing = list_emails(ws)
    assert "[3 of 3 e-mails]" in listing
    assert "mail/board.eml\t" in listing and "mail/inbox.mbox#1\t" in listing and "1 attachment(s)" in listing


def test_read_email_shows_headers_body_and_attachments(ws):
    text = read_email(ws, "mail/board.eml")
    assert "From: cfo@example.org" in text and "Subject: Q3 numbers" in text and "APAC grew 12.5%." in text
    assert "- numbers.csv (text/csv, 8 bytes)" in text
    assert "Subject: Travel" in read_email(ws, "mail/inbox.mbox#1")
    with pytest.raises(ToolError, match="no e-mail with id"):
        read_email(ws, "mail/inbox.mbox#7")


def test_search_emails_by_field_and_time(ws):
    assert search_emails(ws, "tokyo").startswith("mail/inbox.mbox#1")
    assert "No e-mails match" in search_emails(ws, "tokyo", field="subject")
    assert search_emails(ws, "cfo", field="to", since="2024-03-06").startswith("mail/inbox.mbox#1")
