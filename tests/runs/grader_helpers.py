"""One judged world's reviews and the agreement they must give, shared by the selector and API tests of
grader health: rollouts q0 and q1 of run "judge-small", z of run "judge-large", each with c1
(number_close) and c2 (llm_judge); six current reviews, two of which overturn the grader."""

from __future__ import annotations

import pytest

from runs.models import RolloutBody
from runs.services.quality import criterion_review_set
from tests.runs.factories import add_rollout

T, F = True, False

# Each kind: (T,T), (F,F), (T,F) → p_o = 2/3, p_e = 4/9, κ = (2/9) / (5/9) = 0.4.
AGREEMENT_ROWS = {
    "by_kind": {
        "number_close": (3, 2, pytest.approx(2 / 3), pytest.approx(0.4)),
        "llm_judge": (3, 2, pytest.approx(2 / 3), pytest.approx(0.4)),
    },
    "by_judge": {
        "judge-small": (2, 1, 0.5, pytest.approx(0.0)),
        "judge-large": (1, 1, 1.0, None),
    },
    "by_task": {
        "Revenue question": (2, 1, 0.5, pytest.approx(0.0)),
        "Zeta question": (2, 1, 0.5, pytest.approx(0.0)),
        "Margin question": (2, 2, 1.0, None),
    },
}


def graded_rollout(run, version, *, number_met: bool, judge_met: bool):
    """A rollout whose verdicts are c1 (number_close) and c2 (llm_judge, with the judge's rationale)."""
    rollout = add_rollout(run, version, passed=number_met and judge_met, split="eval")
    RolloutBody.objects.filter(rollout=rollout).update(
        verdicts=[
            {
                "criterion_id": "c1",
                "kind": "number_close",
                "met": number_met,
                "rationale": None,
                "weight": 1,
                "required": True,
            },
            {
                "criterion_id": "c2",
                "kind": "llm_judge",
                "met": judge_met,
                "rationale": "It cites the notes.",
                "weight": 1,
                "required": True,
            },
        ]
    )
    return rollout


def review_all(rollouts: dict, reviewer) -> None:
    """Six current reviews, two of them overturning the grader (q0's c2 and z's c1); q0's c1 is a change
    of mind: the first word is replaced by the second."""
    criterion_review_set(
        rollout=rollouts["q0"], user=reviewer, criterion_id="c1", reviewer_met=F, note="misread"
    )
    criterion_review_set(rollout=rollouts["q0"], user=reviewer, criterion_id="c1", reviewer_met=T)
    criterion_review_set(
        rollout=rollouts["q0"], user=reviewer, criterion_id="c2", reviewer_met=F, note="no citation"
    )
    criterion_review_set(rollout=rollouts["q1"], user=reviewer, criterion_id="c1", reviewer_met=F)
    criterion_review_set(rollout=rollouts["q1"], user=reviewer, criterion_id="c2", reviewer_met=F)
    criterion_review_set(
        rollout=rollouts["z"], user=reviewer, criterion_id="c1", reviewer_met=F, note="says 12"
    )
    criterion_review_set(rollout=rollouts["z"], user=reviewer, criterion_id="c2", reviewer_met=T)


def agreement_rows(table: list[dict]) -> dict:
    return {row["name"]: (row["reviews"], row["agreed"], row["rate"], row["kappa"]) for row in table}
