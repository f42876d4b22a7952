"""PDF and spreadsheet tools over real PDFs (reportlab) and workbooks (openpyxl)."""

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from rl_engine.mcp_server.tools_documents import list_sheets, pdf_info, read_pdf, read_spreadsheet, search_pdf
from rl_engine.mcp_server.workspace import ServerSettings, Workspace
from tests.rl_engine.sandbox_world import make_world


@pytest.fixture
def ws(tmp_path) -> Workspace:
    workspace = Workspace()
    workspace.configure(make_world(tmp_path), ServerSettings())
    return workspace


def test_pdf_info_gives_page_count_and_metadata(ws):
    info = pdf_info(ws, "docs/report.pdf")
    assert "pages: 2" in info and "title: Q3" in info and "author: Finance team" in info


def test_read_pdf_reads_a_page_range_and_refuses_a_bad_one(ws):
    first = read_pdf(ws, "docs/report.pdf", start_page=1, end_page=1)
    assert "--- page 1 ---" in first and "Total revenue 4.2m" in first and "page 2" not in first
    with pytest.raises(ToolError, match="has 2 pages"):
        read_pdf(ws, "docs/report.pdf", start_page=2, end_page=5)
    with pytest.raises(ToolError, match="not a readable PDF"):
        read_pdf(ws, "docs/readme.txt")


def test_search_pdf_finds_pages_in_one_file_or_a_folder(ws):
    assert search_pdf(ws, "apac", path="docs/report.pdf") == "docs/report.pdf p.2: APAC growth 12.5%"
    assert "p.1: Total revenue 4.2m" in search_pdf(ws, r"revenue \d", regex=True)


def test_list_sheets_lists_workbook_sheets_and_a_csv_as_one(ws):
    sheets = list_sheets(ws, "data/sales.xlsx").splitlines()
    assert sheets[0].startswith("Sales\trange A1:D3") and sheets[1].startswith("Notes")
    assert list_sheets(ws, "data/targets.csv").startswith("targets\t3 rows x 2 columns")


def test_a_formula_without_a_cached_value_shows_the_formula_never_an_empty_value(ws):
    table = read_spreadsheet(ws, "data/sales.xlsx", range="B2:D2")
    assert (
        table.splitlines()[1]
        == "B2=100 | C2=112.5 | D2==B2+C2 (value not cached; compute it from the referenced cells)"
    )


def test_read_spreadsheet_picks_sheets_ranges_and_csv(ws):
    assert "A1=draft" in read_spreadsheet(ws, "data/sales.xlsx", sheet="Notes")
    assert read_spreadsheet(ws, "data/targets.csv", range="A2:B2").splitlines()[1] == "A2=APAC | B2=10"
    with pytest.raises(ToolError, match="sheets are: Sales, Notes"):
        read_spreadsheet(ws, "data/sales.xlsx", sheet="Missing")
    with pytest.raises(ToolError, match="invalid range"):
        read_spreadsheet(ws, "data/sales.xlsx", range="nonsense!")
    with pytest.raises(ToolError, match="not a readable .xlsx"):
        read_spreadsheet(ws, "docs/readme.txt")
