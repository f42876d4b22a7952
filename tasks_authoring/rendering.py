"""Markdown as the agent's instruction is shown to people: rendered, then sanitised with nh3."""

from __future__ import annotations

import markdown as markdown_lib
import nh3

_ALLOWED_TAGS = nh3.ALLOWED_TAGS | {"table", "thead", "tbody", "tr", "th", "td", "pre", "code", "hr"}


def render_markdown(text: str) -> str:
    html = markdown_lib.markdown(text or "", extensions=["tables", "fenced_code", "sane_lists"])
    return nh3.clean(html, tags=_ALLOWED_TAGS, link_rel="noopener noreferrer nofollow")
