"""Tool names are part of the bundle format (DESIGN.md): `[practicum] tools` lists enabled ones."""

TOOL_GROUPS: dict[str, tuple[str, ...]] = {
    "files": ("list_files", "directory_tree", "file_info", "read_text", "search_files"),
    "pdf": ("pdf_info", "read_pdf", "search_pdf"),
    "spreadsheets": ("list_sheets", "read_spreadsheet"),
    "chat": ("list_chat_channels", "read_chat"),
    "email": ("list_emails", "search_emails", "read_email"),
    "actions": ("write_file", "run_python", "submit_answer"),
}

ALL_TOOLS: tuple[str, ...] = tuple(name for group in TOOL_GROUPS.values() for name in group)


def unknown_tools(names: list[str]) -> list[str]:
    known = set(ALL_TOOLS)
    return [name for name in names if name not in known]
