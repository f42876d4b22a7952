"""Rubric grading: the deterministic kinds of DESIGN.md and `llm_judge` over an OpenAI-compatible endpoint."""

from .grader import grade
from .models import GradeResult, JudgeConfig, Verdict

__all__ = ["GradeResult", "JudgeConfig", "Verdict", "grade"]
