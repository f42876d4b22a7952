"""The six demo tasks (finance, law, consulting): instruction, generated world files, rubric, golden answer.

The numbers agree across each task's PDF, workbook, chat log and e-mails, and each golden answer (or
solution script) meets every deterministic criterion; tests/tasks_authoring/test_demo.py grades them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import demo_files as make

CRITERION = tuple[str, str, dict[str, Any], bool]  # text, kind, params, required


@dataclass
class DemoTask:
    slug: str
    title: str
    domain: str
    difficulty: str
    instruction: str
    files: dict[str, bytes]
    criteria: list[CRITERION]
    golden_answer: str
    solution_script: str = ""
    tools: list[str] | None = None


def _apac_growth() -> DemoTask:
    pdf = make.pdf_document(
        "Board memo: FY2024 regional performance",
        [
            (
                "Summary",
                [
                    "Group revenue grew 9.8% in FY2024. APAC was the fastest-growing region on a reported basis."
                ],
            ),
            (
                "One-off items",
                [
                    "APAC FY2024 revenue includes a one-off perpetual licence sale to Kestrel Telecom of "
                    "$10.0m, booked in Q4. Management's adjusted figures exclude it.",
                    "The board's target for adjusted APAC growth in FY2024 was 13.0%.",
                ],
            ),
        ],
        "Table 2: One-off items by region (USD m)",
        [
            ["Region", "FY2023", "FY2024"],
            ["Americas", "0.0", "0.0"],
            ["EMEA", "2.5", "0.0"],
            ["APAC", "0.0", "10.0"],
        ],
        "Adjusted growth = (FY2024 revenue − FY2024 one-offs) / (FY2023 revenue − FY2023 one-offs) − 1.",
    )
    book = make.workbook(
        {
            "Revenue": [
                ["Region", "FY2023", "FY2024", "Reported growth"],
                ["Americas", 820.0, 878.0, "=C2/B2-1"],
                ["EMEA", 610.0, 652.0, "=C3/B3-1"],
                ["APAC", 400.0, 460.0, "=C4/B4-1"],
                ["Total", "=SUM(B2:B4)", "=SUM(C2:C4)", "=C5/B5-1"],
            ]
        }
    )
    chat = make.chat_json(
        "fpa-apac",
        [
            ("Priya Raman", "2024-11-04T09:12:00Z", "Board pack draft is up. APAC reported growth is 15%."),
            (
                "Tom Becker",
                "2024-11-04T09:20:00Z",
                "Remember the Kestrel licence is one-off; the board wants adjusted.",
            ),
            (
                "Priya Raman",
                "2024-11-04T09:31:00Z",
                "Right, I'll take the $10m out of FY2024 for the adjusted view.",
            ),
        ],
    )
    mail = make.email_message(
        sender="CFO Office <cfo@northwind.example>",
        to="FP&A <fpa@northwind.example>",
        subject="APAC growth for the board",
        sent="2024-11-05T08:00:00+00:00",
        body="Please give me the adjusted APAC growth for FY2024 and whether we met the board's target.\n",
    )
    return DemoTask(
        slug="demo-apac-adjusted-growth",
        title="Adjusted APAC revenue growth for the board",
        domain="finance",
        difficulty="easy",
        instruction=(
            "The CFO asks for FY2024 **adjusted** revenue growth in APAC and whether the board's target was met.\n\n"
            "Use the workbook, the board memo and the team's chat. State the growth as a percentage "
            "with one decimal, and say whether the target is met."
        ),
        files={
            "board_memo.pdf": pdf,
            "revenue_by_region.xlsx": book,
            "chat/fpa-apac.json": chat,
            "emails/cfo_request.eml": mail,
        },
        criteria=[
            (
                "States the adjusted APAC growth is 12.5%",
                "number_close",
                {"value": 12.5, "rel_tol": 0.01},
                True,
            ),
            (
                "Says the 13.0% target is not met",
                "regex",
                {"pattern": r"not\s+met|missed|below (the )?target"},
                True,
            ),
            ("Explains that the $10.0m Kestrel licence sale was excluded as one-off", "llm_judge", {}, False),
        ],
        golden_answer=(
            "Adjusted APAC growth in FY2024 was **12.5%**: (460.0 − 10.0) / 400.0 − 1, excluding the one-off "
            "$10.0m Kestrel licence sale. The board's 13.0% target was not met.\n"
        ),
    )


def _covenant() -> DemoTask:
    pdf = make.pdf_document(
        "Senior Facilities Agreement — extract",
        [
            (
                "Clause 22.2 Financial condition",
                [
                    "The Borrower shall ensure that Leverage in respect of any Relevant Period does not exceed 3.00:1.",
                    "“Leverage” means Total Net Debt on the last day of the Relevant Period divided by EBITDA "
                    "for that Relevant Period (the last four financial quarters).",
                ],
            ),
            ("Clause 22.1 Definitions", ["“Total Net Debt” means Total Debt less Cash at the test date."]),
        ],
        "Schedule 4: Permitted EBITDA add-backs (USD m)",
        [
            ["Item", "Cap", "Status"],
            ["Restructuring costs", "5.0", "Permitted"],
            ["Transaction fees", "2.0", "Permitted"],
        ],
        "Leverage is tested quarterly; a breach is an Event of Default under clause 25.",
    )
    book = make.workbook(
        {
            "Covenant": [
                ["Item", "USD m"],
                ["Total debt", 300.0],
                ["Cash (Dec close)", 25.0],
                ["Net debt", "=B2-B3"],
                ["EBITDA Q1", 22.0],
                ["EBITDA Q2", 24.0],
                ["EBITDA Q3", 26.0],
                ["EBITDA Q4", 28.0],
                ["LTM EBITDA", "=SUM(B5:B8)"],
                ["Leverage", "=B4/B9"],
            ]
        }
    )
    chat = make.chat_jsonl(
        "credit-desk",
        [
            ("Lena Ortiz", "2025-03-03T10:02:00Z", "Borrower's compliance certificate is due Friday."),
            (
                "Sam Okafor",
                "2025-03-03T10:05:00Z",
                "Workbook cash is the December close. Their CFO says cash was lower at test date.",
            ),
            ("Lena Ortiz", "2025-03-03T10:07:00Z", "Use the CFO's figure, it's the test-date balance."),
        ],
    )
    mail = make.email_message(
        sender="Dana Whitfield <cfo@harbourline.example>",
        to="Credit Desk <credit@lender.example>",
        subject="Cash at test date",
        sent="2025-03-03T09:40:00+00:00",
        body="Correction for the covenant test: cash at the test date was USD 15.0m, not the 25.0m in the December pack.\n",
    )
    solve = (
        "from openpyxl import Workbook\n"
        "import os\n"
        "leverage = round((300.0 - 15.0) / (22.0 + 24.0 + 26.0 + 28.0), 2)\n"
        "os.makedirs('output', exist_ok=True)\n"
        "book = Workbook()\n"
        "sheet = book.active\n"
        "sheet.title = 'Covenant'\n"
        "sheet.append(['Leverage', leverage])\n"
        "book.save('output/covenant.xlsx')\n"
        "print(f'Leverage is {leverage:.2f}x against a 3.00x maximum, so the borrower is compliant. '\n"
        "      'Net debt uses the CFO\\'s test-date cash of USD 15.0m: (300.0 - 15.0) / 100.0.')\n"
    )
    return DemoTask(
        slug="demo-leverage-covenant-test",
        title="Leverage covenant test at quarter end",
        domain="finance",
        difficulty="medium",
        instruction=(
            "Test the leverage covenant in the facilities agreement for the last four quarters. "
            "Write the leverage to `output/covenant.xlsx` (sheet `Covenant`, cell B1, with the label "
            "in A1) and say whether the borrower is compliant."
        ),
        files={
            "facilities_agreement_extract.pdf": pdf,
            "covenant_model.xlsx": book,
            "chat/credit-desk.jsonl": chat,
            "emails/cash_correction.eml": mail,
        },
        criteria=[
            ("States leverage of 2.85x", "number_close", {"value": 2.85, "rel_tol": 0.005}, True),
            (
                "Concludes the borrower is compliant",
                "regex",
                {"pattern": r"\bcompliant\b|within the covenant"},
                True,
            ),
            (
                "Writes the workbook output/covenant.xlsx",
                "file_exists",
                {"path": "output/covenant.xlsx"},
                False,
            ),
            (
                "The workbook's Covenant!B1 holds 2.85",
                "xlsx_cell_equals",
                {
                    "path": "output/covenant.xlsx",
                    "sheet": "Covenant",
                    "cell": "B1",
                    "value": 2.85,
                    "tol": 0.005,
                },
                False,
            ),
            ("Uses the CFO's test-date cash of 15.0m rather than the December 25.0m", "llm_judge", {}, False),
        ],
        golden_answer=(
            "Leverage is 2.85x against a 3.00x maximum, so the borrower is compliant. Net debt uses the "
            "CFO's test-date cash of USD 15.0m: (300.0 - 15.0) / 100.0.\n"
        ),
        solution_script=solve,
    )


def _nda_survival() -> DemoTask:
    pdf = make.pdf_document(
        "Mutual Non-Disclosure Agreement — Aster Bio / Calder Labs",
        [
            (
                "1. Definitions",
                ["“Confidential Information” means all information disclosed by either party."],
            ),
            (
                "7. Term and survival",
                [
                    "7.1 This Agreement continues for two (2) years from the Effective Date of 1 March 2023.",
                    "7.2 The obligations in clause 4 survive termination for five (5) years.",
                ],
            ),
        ],
        "Schedule 1: Amendments",
        [
            ["No.", "Clause", "Date", "Change"],
            ["1", "7.2", "2024-02-12", "See amendment letter"],
            ["2", "9.1", "2024-05-30", "Governing law: England"],
        ],
        "Amendments take effect only when signed by both parties.",
    )
    book = make.workbook(
        {
            "Tracker": [
                ["Clause", "Start year", "Survival (years)", "Ends"],
                ["4 (confidentiality)", 2025, 5, "=B2+C2"],
                ["6 (non-solicit)", 2025, 1, "=B3+C3"],
            ]
        }
    )
    chat = make.chat_json(
        "deal-aster",
        [
            ("Maya Lindqvist", "2024-02-12T14:00:00Z", "Calder countersigned amendment 1 today."),
            (
                "Jonah Reyes",
                "2024-02-12T14:04:00Z",
                "So 7.2 is now three years? The tracker still says five.",
            ),
            ("Maya Lindqvist", "2024-02-12T14:06:00Z", "Yes, three. I'll fix the tracker later."),
        ],
    )
    mail = make.email_message(
        sender="Maya Lindqvist <maya@lindqvist-law.example>",
        to="Aster Bio Legal <legal@asterbio.example>",
        subject="Amendment 1 to the NDA — signed",
        sent="2024-02-12T15:00:00+00:00",
        body="Both parties have signed Amendment 1: in clause 7.2, 'five (5) years' is replaced by 'three (3) years'.\n",
        attachment=(
            "amendment_1.txt",
            "text/plain",
            b"Clause 7.2: replace 'five (5) years' with 'three (3) years'.\n",
        ),
    )
    return DemoTask(
        slug="demo-nda-survival-period",
        title="How long do NDA confidentiality obligations survive?",
        domain="law",
        difficulty="easy",
        instruction=(
            "The client asks how long the confidentiality obligations of the Aster/Calder NDA survive "
            "termination. Answer with the period and cite the clause, taking signed amendments into account."
        ),
        files={
            "nda_aster_calder.pdf": pdf,
            "obligations_tracker.xlsx": book,
            "chat/deal-aster.json": chat,
            "emails/amendment_signed.eml": mail,
        },
        criteria=[
            (
                "States the obligations survive three years",
                "regex",
                {"pattern": r"\b(3|three)\s*(\(3\)\s*)?years?\b"},
                True,
            ),
            ("Cites clause 7.2", "contains", {"value": "clause 7.2"}, True),
            ("Notes that Amendment 1 replaced the original five years", "llm_judge", {}, False),
        ],
        golden_answer=(
            "They survive termination for three (3) years under clause 7.2, as amended by Amendment 1 "
            "(signed 12 February 2024), which replaced the original five years.\n"
        ),
    )


def _lease_break() -> DemoTask:
    pdf = make.pdf_document(
        "Lease of Unit 4, Riverside Works",
        [
            ("Parties", ["Landlord: Greyfriars Estates Ltd. Tenant: Pellucid Studio Ltd."]),
            (
                "Clause 9 Break",
                [
                    "9.1 The Tenant may end this Lease on 24 June 2026 (the Break Date) by giving the Landlord "
                    "not less than six months' written notice.",
                    "9.2 Notices must be served at the Landlord's address for service as last notified in writing.",
                ],
            ),
        ],
        "Schedule 2: Rent (GBP per month)",
        [
            ["Lease year", "Monthly rent", "Review"],
            ["1", "10,000", "—"],
            ["2", "10,300", "+3%"],
            ["3", "10,609", "+3%"],
        ],
        "Rent is reviewed annually on the anniversary of the term start by 3% compound.",
    )
    book = make.workbook(
        {
            "Rent": [
                ["Year", "Monthly", "Annual"],
                [1, 10000, "=B2*12"],
                [2, "=B2*1.03", "=B3*12"],
                [3, "=B3*1.03", "=B4*12"],
            ]
        }
    )
    chat = make.chat_jsonl(
        "property",
        [
            ("Ines Carvalho", "2025-09-01T11:00:00Z", "Pellucid want out at the break. When must notice go?"),
            (
                "Rob Hale",
                "2025-09-01T11:05:00Z",
                "Six months before 24 June. Check the landlord's notice address, they moved.",
            ),
        ],
    )
    mail = make.email_message(
        sender="Greyfriars Estates <lettings@greyfriars.example>",
        to="Pellucid Studio <office@pellucid.example>",
        subject="Change of address for service of notices",
        sent="2025-04-14T09:30:00+00:00",
        body="With effect from 1 May 2025 our address for service is 18 Mercer Row, Bristol BS1 4QD.\n",
    )
    return DemoTask(
        slug="demo-lease-break-notice",
        title="Lease break: notice deadline and year-3 rent",
        domain="law",
        difficulty="medium",
        instruction=(
            "The tenant wants to exercise the break. Give the last date by which notice must be served, "
            "where it must be served, and the annual rent in lease year 3 (GBP, whole pounds)."
        ),
        files={
            "lease_unit4.pdf": pdf,
            "rent_schedule.xlsx": book,
            "chat/property.jsonl": chat,
            "emails/notice_address.eml": mail,
        },
        criteria=[
            (
                "States notice must be served by 24 December 2025",
                "regex",
                {"pattern": r"24(th)?\s+December\s+2025|2025-12-24"},
                True,
            ),
            (
                "States year-3 annual rent of £127,308",
                "number_close",
                {"value": 127308, "rel_tol": 0.001},
                True,
            ),
            (
                "Says notice goes to 18 Mercer Row, Bristol (the new address for service)",
                "contains",
                {"value": "18 Mercer Row"},
                False,
            ),
            ("Explains why the old address in the lease no longer applies", "llm_judge", {}, False),
        ],
        golden_answer=(
            "Serve written notice by 24 December 2025 (six months before the 24 June 2026 break date) at the "
            "landlord's current address for service, 18 Mercer Row, Bristol BS1 4QD, notified on 14 April 2025. "
            "Year-3 annual rent is £127,308 (10,000 × 1.03² × 12).\n"
        ),
    )


def _market_sizing() -> DemoTask:
    pdf = make.pdf_document(
        "Lisbon urban mobility survey 2024",
        [
            ("Method", ["1,200 households surveyed in Lisbon in May 2024; results weighted to the census."]),
            (
                "Findings",
                ["Interest in e-bike subscriptions is highest among households headed by 25–44 year-olds."],
            ),
        ],
        "Table 3: Stated adoption of an e-bike subscription at €50/month",
        [
            ["Segment", "Households", "Adoption"],
            ["All households", "545,000", "2.1%"],
            ["Head aged 25–44", "120,000", "4.0%"],
        ],
        "Adoption is the share answering 'very likely' to subscribe within 12 months.",
    )
    book = make.workbook(
        {
            "Sizing": [
                ["Input", "Value"],
                ["Households in segment", 545000],
                ["Adoption", 0.021],
                ["Annual price (EUR)", "=50*12"],
                ["Market (EUR)", "=B2*B3*B4"],
            ]
        }
    )
    chat = make.chat_json(
        "ebike-case",
        [
            (
                "Partner — Clara Nunes",
                "2024-06-03T08:45:00Z",
                "Client only targets 25–44 households. Size that segment, not all of Lisbon.",
            ),
            (
                "Analyst — Ben Ito",
                "2024-06-03T08:50:00Z",
                "The model still has all households; I'll switch the inputs.",
            ),
        ],
    )
    mail = make.email_message(
        sender="VeloLisboa <strategy@velolisboa.example>",
        to="Case team <team@consultancy.example>",
        subject="Sizing request",
        sent="2024-06-02T17:00:00+00:00",
        body="Please size the annual revenue opportunity for our €50/month subscription in our target segment.\n",
    )
    return DemoTask(
        slug="demo-ebike-market-sizing",
        title="Size the e-bike subscription market in Lisbon",
        domain="consulting",
        difficulty="easy",
        instruction=(
            "Size the annual revenue opportunity (EUR) of VeloLisboa's €50/month e-bike subscription in the "
            "client's target segment. Give the figure in millions with two decimals and show the inputs."
        ),
        files={
            "mobility_survey_2024.pdf": pdf,
            "sizing_model.xlsx": book,
            "chat/ebike-case.json": chat,
            "emails/client_request.eml": mail,
        },
        criteria=[
            ("States the market is €2.88m a year", "number_close", {"value": 2.88, "rel_tol": 0.005}, True),
            ("Uses the 4.0% adoption of the 25–44 segment", "regex", {"pattern": r"4(\.0)?\s*%"}, True),
            ("Uses the segment, not all households, because the partner said so", "llm_judge", {}, False),
        ],
        golden_answer=(
            "The opportunity is **€2.88m** a year: 120,000 households headed by 25–44 year-olds × 4.0% adoption "
            "× €600 a year (€50 × 12).\n"
        ),
    )


def _cost_programme() -> DemoTask:
    pdf = make.pdf_document(
        "Steering committee: cost programme options",
        [
            ("Context", ["The COO asked for a ranked shortlist of initiatives by payback."]),
            ("Approach", ["Payback (years) = one-off cost / annual saving. Shorter is better."]),
        ],
        "Table 1: Initiatives (EUR m)",
        [
            ["Initiative", "One-off cost", "Annual saving"],
            ["Procurement consolidation", "1.2", "1.5"],
            ["Shared service centre", "4.0", "2.0"],
            ["Headcount reduction (ops)", "0.5", "1.8"],
            ["Energy retrofit", "3.0", "0.6"],
        ],
        "All figures before tax; savings are run-rate from year 2.",
    )
    book = make.workbook(
        {
            "Initiatives": [
                ["Initiative", "Cost", "Saving", "Payback (years)"],
                ["Procurement consolidation", 1.2, 1.5, "=B2/C2"],
                ["Shared service centre", 4.0, 2.0, "=B3/C3"],
                ["Headcount reduction (ops)", 0.5, 1.8, "=B4/C4"],
                ["Energy retrofit", 3.0, 0.6, "=B5/C5"],
            ]
        }
    )
    chat = make.chat_jsonl(
        "cost-programme",
        [
            ("Noor Haddad", "2024-09-10T13:00:00Z", "Headcount has the best payback on paper."),
            ("Eli Brandt", "2024-09-10T13:02:00Z", "Check the COO's note before ranking it."),
        ],
    )
    mail = make.email_message(
        sender="COO <coo@meridian.example>",
        to="Programme team <pmo@meridian.example>",
        subject="Constraint for the shortlist",
        sent="2024-09-09T18:20:00+00:00",
        body="To be clear: no headcount reductions this year. Leave them out of the ranking.\n",
    )
    solve = (
        "import csv, os\n"
        "rows = [('Procurement consolidation', 1.2, 1.5), ('Shared service centre', 4.0, 2.0),\n"
        "        ('Energy retrofit', 3.0, 0.6)]\n"
        "ranked = sorted(((name, cost / saving) for name, cost, saving in rows), key=lambda r: r[1])\n"
        "os.makedirs('output', exist_ok=True)\n"
        "with open('output/ranking.csv', 'w', newline='') as handle:\n"
        "    writer = csv.writer(handle)\n"
        "    writer.writerow(['initiative', 'payback_years'])\n"
        "    writer.writerows((name, f'{years:.2f}') for name, years in ranked)\n"
        "print(f'Top initiative: Procurement consolidation, payback 0.80 years. Headcount reduction is '\n"
        "      'excluded per the COO. Ranking: ' + ', '.join(f'{n} ({y:.2f})' for n, y in ranked))\n"
    )
    return DemoTask(
        slug="demo-cost-programme-ranking",
        title="Rank cost initiatives by payback under the COO's constraint",
        domain="consulting",
        difficulty="medium",
        instruction=(
            "Rank the cost initiatives by payback and name the top one. Write the ranking to "
            "`output/ranking.csv` (columns `initiative`, `payback_years`). Respect any constraint the client set."
        ),
        files={
            "steerco_options.pdf": pdf,
            "initiatives.xlsx": book,
            "chat/cost-programme.jsonl": chat,
            "emails/coo_constraint.eml": mail,
        },
        criteria=[
            (
                "Names procurement consolidation as the top initiative",
                "contains",
                {"value": "Procurement consolidation"},
                True,
            ),
            ("States its payback is 0.8 years", "number_close", {"value": 0.8, "rel_tol": 0.01}, True),
            ("Writes output/ranking.csv", "file_exists", {"path": "output/ranking.csv"}, False),
            ("Leaves headcount reduction out because of the COO's e-mail", "llm_judge", {}, False),
        ],
        golden_answer=(
            "Top initiative: Procurement consolidation, payback 0.80 years. Headcount reduction is excluded per "
            "the COO. Ranking: Procurement consolidation (0.80), Shared service centre (2.00), Energy retrofit (5.00)\n"
        ),
        solution_script=solve,
    )


def demo_tasks() -> list[DemoTask]:
    return [_apac_growth(), _covenant(), _nda_survival(), _lease_break(), _market_sizing(), _cost_programme()]
