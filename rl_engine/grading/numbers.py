"""Numbers in prose, read as written: "12.5%" is 12.5, "$2.8bn" is 2.8, "(1,234)" is -1234.

Stdlib only: this module is embedded verbatim in the exported tests/grade.py.
"""

from __future__ import annotations

import re

# A sign counts only at the start of a token, so "2024-03" and "10-12" hold no negative numbers.
_NUMBER = re.compile(
    r"""
    (?<![\w.])
    (?P<open>\()?
    (?P<sign1>[-+\u2212])?
    [$\u20ac\u00a3\u00a5]?
    (?P<sign2>[-+\u2212])?
    (?P<digits>\d{1,3}(?:,\d{3})+(?!\d)|\d+)?
    (?P<fraction>\.\d+)?
    (?P<exponent>[eE][-+]?\d+(?![\w]))?
    (?P<close>%?\))?
    """,
    re.VERBOSE,
)


def numbers_in(text: str) -> list[tuple[float, str]]:
    """Every number in `text` as (value, the text it was read from), in order of appearance."""
    found: list[tuple[float, str]] = []
    for match in _NUMBER.finditer(text):
        digits, fraction = match["digits"], match["fraction"]
        if not digits and not fraction:
            continue
        literal = (digits or "0").replace(",", "") + (fraction or "") + (match["exponent"] or "")
        value = float(literal)
        signs = (match["sign1"] or "") + (match["sign2"] or "")
        negative = "-" in signs or "\u2212" in signs or bool(match["open"] and match["close"])
        written = match.group(0) if match["open"] else match.group(0).rstrip(")")
        found.append((-value if negative else value, written))
    return found
