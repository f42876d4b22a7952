"""`llm_judge` over an OpenAI-compatible endpoint: one structured verdict per criterion.

An empty answer with no text in output/ is not met without asking the judge (checks.empty_evidence_check).
A judge that still fails after its retries (HTTP 5xx or 429, a timeout, a refused connection, or
an answer that is not a verdict) raises HarnessError(JUDGE) with the last response body as
detail: a failed judge is never a score of 0. Other 4xx answers (bad key, unknown model) are not
retried, since asking again cannot help.
"""

from __future__ import annotations

import asyncio

import httpx

from ..outcomes import HarnessCode, HarnessError
from .checks import VERDICT_SCHEMA, Check, empty_evidence_check, judge_messages, parse_verdict
from .models import JudgeConfig


def _request_body(model: str, messages: list[dict[str, str]]) -> dict:
    return {
        "model": model,
        "messages": messages,
        "temperature": 0,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "verdict", "schema": VERDICT_SCHEMA, "strict": True},
        },
    }


def _reply_content(response: httpx.Response) -> str | None:
    try:
        return response.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None


async def judge_criterion(
    client: httpx.AsyncClient,
    config: JudgeConfig,
    *,
    criterion: str,
    answer: str,
    files: dict[str, str],
    model: str | None = None,
) -> Check:
    empty = empty_evidence_check(answer, files)
    if empty is not None:
        return empty
    url = config.base_url.rstrip("/") + "/chat/completions"
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    body = _request_body(model or config.model, judge_messages(criterion, answer, files))
    attempts = config.retries + 1
    problem, last_body = "", ""
    for attempt in range(attempts):
        if attempt:
            await asyncio.sleep(config.backoff_sec * 2 ** (attempt - 1))
        try:
            response = await client.post(url, json=body, headers=headers, timeout=config.timeout_sec)
        except httpx.TimeoutException:
            problem, last_body = f"timed out after {config.timeout_sec:g} s", ""
            continue
        except httpx.HTTPError as exc:
            problem, last_body = f"request failed ({type(exc).__name__}: {exc})", ""
            continue
        last_body = response.text
        if response.status_code >= 400:
            problem = f"answered HTTP {response.status_code}"
            if response.status_code < 500 and response.status_code != 429:
                attempts = attempt + 1
                break
            continue
        verdict = parse_verdict(_reply_content(response))
        if verdict is not None:
            return verdict
        problem = "answered garbage, not a {rationale, is_criteria_true} verdict"
    raise HarnessError(
        HarnessCode.JUDGE,
        f"judge at {url} {problem} ({attempts} attempt{'s' if attempts > 1 else ''}) for criterion {criterion!r}",
        detail=last_body,
    )
