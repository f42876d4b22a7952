"""PDF and spreadsheet tools (pypdf, openpyxl, csv)."""

import csv
from pathlib import Path
from typing import Annotated

import openpyxl
import pypdf
from mcp.server.mcpserver.exceptions import ToolError
from openpyxl.utils import get_column_letter
from openpyxl.utils.cell import range_boundaries
from pydantic import Field

from rl_engine.mcp_server.tools_files import PathArg, compile_query
from rl_engine.mcp_server.workspace import Workspace

_CSV_SUFFIXES = (".csv", ".tsv")


def _open_pdf(ws: Workspace, path: str) -> pypdf.PdfReader:
    target = ws.resolve_file(path)
    try:
        return pypdf.PdfReader(target)
    except pypdf.errors.PdfReadError as exc:
        raise ToolError(f"{path!r} is not a readable PDF: {exc}") from exc


def pdf_info(ws: Workspace, path: PathArg) -> str:
    """Page count and document metadata (title, author, dates) of a PDF."""
    reader = _open_pdf(ws, path)
    lines = [f"path: {path}", f"pages: {len(reader.pages)}", f"encrypted: {reader.is_encrypted}"]
    for key, value in (reader.metadata or {}).items():
        lines.append(f"{key.lstrip('/').lower()}: {value}")
    return "\n".join(lines)


def read_pdf(
    ws: Workspace,
    path: PathArg,
    start_page: Annotated[int, Field(ge=1, description="First page to read, counted from 1.")] = 1,
    end_page: Annotated[int | None, Field(ge=1, description="Last page to read (inclusive).")] = None,
) -> str:
    """Extract the text of a page range of a PDF; each page starts with '--- page N ---'."""
    reader = _open_pdf(ws, path)
    count = len(reader.pages)
    last = end_page or count
    if start_page > count or last > count or last < start_page:
        raise ToolError(f"page range {start_page}-{last} is invalid: {path!r} has {count} pages")
    parts = [
        f"--- page {n} ---\n{reader.pages[n - 1].extract_text() or ''}" for n in range(start_page, last + 1)
    ]
    return f"[{path}: pages {start_page}-{last} of {count}]\n" + "\n".join(parts)


def search_pdf(
    ws: Workspace,
    query: Annotated[str, Field(min_length=1, description="Text to find, or a regular expression.")],
    path: Annotated[str, Field(description="A PDF, or a folder whose PDFs are all searched.")] = ".",
    regex: bool = False,
    case_sensitive: bool = False,
    max_hits: Annotated[int, Field(ge=1, le=1000)] = 100,
) -> str:
    """Search the text of one PDF or of every PDF under a folder; each hit is 'file p.N: line'."""
    matcher = compile_query(query, regex=regex, case_sensitive=case_sensitive)
    start = ws.resolve(path)
    pdfs = [p for p in ws.walk_files(start) if p.suffix.lower() == ".pdf" or p == start]
    hits = []
    for pdf in pdfs:
        for number, page in enumerate(_open_pdf(ws, ws.relative(pdf)).pages, 1):
            for line in (page.extract_text() or "").splitlines():
                if matcher.search(line):
                    hits.append(f"{ws.relative(pdf)} p.{number}: {line.strip()[:300]}")
                    if len(hits) >= max_hits:
                        return "\n".join(hits) + f"\n[stopped at max_hits={max_hits}]"
    return "\n".join(hits) if hits else f"No matches for {query!r} in {len(pdfs)} PDF(s)."


def _is_csv(target: Path) -> bool:
    return target.suffix.lower() in _CSV_SUFFIXES


def _read_csv(target: Path) -> list[list[str]]:
    with target.open(newline="", encoding="utf-8", errors="replace") as handle:
        sample = handle.read(8192)
        handle.seek(0)
        try:
            dialect = csv.Sniffer().sniff(sample, delimiters=",;\t|")
        except csv.Error:
            dialect = csv.excel_tab if target.suffix.lower() == ".tsv" else csv.excel
        return list(csv.reader(handle, dialect))


def _open_workbooks(target: Path, path: str):
    """The workbook twice: formulas as written, and the values Excel last cached for them."""
    try:
        formulas = openpyxl.load_workbook(target, data_only=False, read_only=False)
        values = openpyxl.load_workbook(target, data_only=True, read_only=False)
    except Exception as exc:  # openpyxl raises many kinds for a file that is not a workbook
        raise ToolError(f"{path!r} is not a readable .xlsx workbook: {exc}") from exc
    return formulas, values


def list_sheets(ws: Workspace, path: PathArg) -> str:
    """The sheets of a workbook (.xlsx) with their used range; a CSV file counts as one sheet."""
    target = ws.resolve_file(path)
    if _is_csv(target):
        rows = _read_csv(target)
        return f"{target.stem}\t{len(rows)} rows x {max((len(r) for r in rows), default=0)} columns (csv)"
    formulas, _ = _open_workbooks(target, path)
    return "\n".join(
        f"{sheet.title}\trange {sheet.dimensions}\t{sheet.max_row} rows x {sheet.max_column} columns"
        for sheet in formulas.worksheets
    )


def _cell_text(formula_cell, value_cell) -> str:
    written = formula_cell.value
    if isinstance(written, str) and written.startswith("="):
        cached = value_cell.value
        if cached is None:
            return f"{written} (value not cached; compute it from the referenced cells)"
        return f"{cached} [{written}]"
    if written is None:
        return ""
    if hasattr(written, "text"):  # array formulas and rich text
        return str(written.text)
    return str(written)


def read_spreadsheet(
    ws: Workspace,
    path: PathArg,
    sheet: Annotated[str | None, Field(description="Sheet name; the first sheet when omitted.")] = None,
    range: Annotated[
        str | None, Field(description="A1 range such as 'A1:D20'; the used range when omitted.")
    ] = None,
    max_rows: Annotated[int, Field(ge=1, le=5000)] = 200,
) -> str:
    """Read cells of a workbook sheet (.xlsx) or a CSV file as a table of 'A1=value' rows.

    Formula cells show the cached value and the formula as 'value [=FORMULA]'. A formula whose value
    was never computed (workbooks written by libraries) is shown as '=FORMULA (value not cached ...)'.
    """
    cell_range = range
    target = ws.resolve_file(path)
    bounds = _parse_range(cell_range) if cell_range else None
    if _is_csv(target):
        rows = _read_csv(target)
        grid = [
            [(f"{get_column_letter(c)}{r}", v) for c, v in enumerate(row, 1)] for r, row in enumerate(rows, 1)
        ]
        title = target.stem
    else:
        formulas, values = _open_workbooks(target, path)
        names = formulas.sheetnames
        if sheet is not None and sheet not in names:
            raise ToolError(f"no sheet {sheet!r} in {path!r}; sheets are: {', '.join(names)}")
        title = sheet or names[0]
        formula_sheet, value_sheet = formulas[title], values[title]
        grid = [
            [(cell.coordinate, _cell_text(cell, value_sheet[cell.coordinate])) for cell in row]
            for row in formula_sheet.iter_rows()
        ]
    if bounds:
        min_col, min_row, max_col, max_row = bounds
        grid = [
            [(ref, v) for c, (ref, v) in enumerate(row, 1) if min_col <= c <= max_col]
            for r, row in enumerate(grid, 1)
            if min_row <= r <= max_row
        ]
    lines = [" | ".join(f"{ref}={v}" for ref, v in row if v != "") for row in grid]
    lines = [line for line in lines if line]
    shown = lines[:max_rows]
    more = (
        f"\n[{len(lines) - len(shown)} more non-empty rows; narrow the range]"
        if len(lines) > len(shown)
        else ""
    )
    header = f"[{path} / {title}" + (f" / {cell_range}" if cell_range else "") + "]"
    return header + "\n" + ("\n".join(shown) if shown else "(no values in this range)") + more


def _parse_range(cell_range: str) -> tuple[int, int, int, int]:
    try:
        min_col, min_row, max_col, max_row = range_boundaries(cell_range.upper().replace("$", ""))
    except (ValueError, TypeError) as exc:
        raise ToolError(f"invalid range {cell_range!r}; use A1 notation such as 'A1:D20'") from exc
    if None in (min_col, min_row, max_col, max_row):
        raise ToolError(f"range {cell_range!r} must name both corners, e.g. 'A1:D20'")
    return min_col, min_row, max_col, max_row


TOOLS = [pdf_info, read_pdf, search_pdf, list_sheets, read_spreadsheet]
