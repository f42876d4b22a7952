"""The text a rollout's "search in messages" filter looks in, built once when the rollout is stored.

Turn contents, tool calls (name, arguments, result), the final answer, the summary's message and the
harness error's detail, case-folded, each distinct word kept once, into `RolloutSearchText.text`
(written after ingestion commits, runs/services/search_index.py).
A search matches the rollouts whose text holds every word of the query (as a word or inside one:
`pdf` finds `reports/q2.pdf`), one substring match (`contains`) per word, which PostgreSQL answers
from a pg_trgm GIN index (migration 0008) and SQLite by a scan. Cut at SEARCH_TEXT_LIMIT characters
so one huge transcript cannot bloat the index; docs/runs.md "Traces" says so.
"""

from __future__ import annotations

from typing import Any

SEARCH_TEXT_LIMIT = 256 * 1024


def fold(text: str) -> str:
    """How both the stored text and the query are normalised, so the match ignores case."""
    return text.casefold()


def search_text_of(
    *, turns: list, final_answer: str | None = None, message: str = "", error_detail: str = ""
) -> str:
    parts: list[str] = [message or ""]
    for turn in turns or []:
        if not isinstance(turn, dict):
            continue
        parts.append(str(turn.get("content") or ""))
        for call in turn.get("tool_calls") or []:
            if not isinstance(call, dict):
                continue
            parts.append(str(call.get("name") or ""))
            parts.extend(_values(call.get("arguments")))
            parts.append(str(call.get("result_text") or ""))
    parts += [final_answer or "", error_detail or ""]
    # Each distinct word once, in order of first appearance: transcripts repeat themselves (tool
    # results above all), and the trigram index costs ingestion per character stored.
    words = dict.fromkeys(fold("\n".join(parts)).split())
    return " ".join(words)[:SEARCH_TEXT_LIMIT]


def search_words(query: str) -> list[str]:
    """The words of a search, each of which must occur in the transcript (as a word or inside one)."""
    return list(dict.fromkeys(fold(query).split()))


def _values(value: Any) -> list[str]:
    """The scalar values of tool-call arguments, so `{"path": "a.pdf"}` is searchable as `a.pdf`."""
    if isinstance(value, dict):
        return [text for item in value.values() for text in _values(item)]
    if isinstance(value, list):
        return [text for item in value for text in _values(item)]
    return [] if value is None else [str(value)]
