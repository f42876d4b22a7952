"""What grading returns, and where the judge lives."""

from __future__ import annotations

from pydantic import BaseModel, Field


class Verdict(BaseModel):
    criterion_id: str
    kind: str
    met: bool
    rationale: str | None
    weight: float
    required: bool
    text: str = ""


class GradeResult(BaseModel):
    score: float
    passed: bool
    verdicts: list[Verdict]


class JudgeConfig(BaseModel):
    """An OpenAI-compatible chat-completions endpoint. `retries` counts attempts after the first."""

    base_url: str
    model: str
    api_key: str = ""
    timeout_sec: float = Field(default=60, gt=0)
    retries: int = Field(default=3, ge=0)
    backoff_sec: float = Field(default=1.0, ge=0)
