"""The in-run harness health gate: stop before an update rather than train on a corrupted signal.

Harness errors are masked from the update, but a harness that breaks for a share of the rollouts
biases what is left (a tool that hangs on long files leaves only the short tasks) — the recipe's
lesson that harness correctness moves the reward more than the algorithm. So the driver keeps a
sliding window of the last `health_gate.window_rollouts` final train rollouts and, after each
step's rollouts and before its update, compares the window's harness error rate with
`max_window_harness_error_rate`. Above it the run stops: `on_trip="fail"` ends it, `"pause"` keeps
a checkpoint of the last completed update so `--resume` continues from there with a fresh window.

The rate is over what the window holds, so it is judged from the first step on (a whole step of
harness errors is enough evidence); the window is in memory only, which is what gives a resumed run
its fresh start. Eval-split rollouts do not count: they never feed an update.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

from rl_engine.spec import HealthGateSpec

# The CLI's exit codes when the gate stops a train run (0 ran, 1 could not run, 2 bad arguments).
EXIT_GATE_FAILED = 3
EXIT_GATE_PAUSED = 4
# The evidence lists at most this many rollout event seqs (the counts are always whole).
MAX_EVIDENCE_SEQS = 200


@dataclass(frozen=True)
class _Seen:
    step: int
    code: str | None  # the harness error code, None for a valid rollout
    seq: int | None  # the `rollout` event that reported it (None when it was not reported again)


@dataclass
class GateTrip:
    action: str  # "fail" | "pause"
    step: int  # the step whose update did not happen
    rate: float
    threshold: float
    rollouts: int  # final rollouts in the window
    window_rollouts: int  # the window's configured size
    harness_errors: int
    by_code: dict[str, int]
    seqs: list[int]
    first_step: int
    last_step: int
    checkpoint: str | None = None  # pause: the checkpoint a resume starts from
    checkpoint_step: int | None = None

    @property
    def message(self) -> str:
        codes = ", ".join(f"{code} {count}" for code, count in self.by_code.items())
        where = f"step {self.last_step}"
        if self.first_step != self.last_step:
            where = f"steps {self.first_step}–{self.last_step}"
        text = (
            f"health gate: {self.harness_errors} of the last {self.rollouts} final rollouts ({where}) were "
            f"harness errors ({self.rate:.1%}, above the {self.threshold:.1%} threshold; {codes}); "
        )
        if self.action == "pause":
            return text + (
                f"paused before the update of step {self.step}, checkpoint of step {self.checkpoint_step} "
                "kept: fix the harness, then resume"
            )
        return text + f"failed before the update of step {self.step}"

    def evidence(self) -> dict[str, Any]:
        """The JSON the `log` and `run_finished` events carry (docs/quality.md, "Health gate")."""
        return {
            "action": self.action,
            "step": self.step,
            "rate": self.rate,
            "threshold": self.threshold,
            "rollouts": self.rollouts,
            "window_rollouts": self.window_rollouts,
            "harness_errors": self.harness_errors,
            "by_code": self.by_code,
            "seqs": self.seqs,
            "first_step": self.first_step,
            "last_step": self.last_step,
            "checkpoint": self.checkpoint,
            "checkpoint_step": self.checkpoint_step,
            "message": self.message,
        }


class HealthGateTripped(Exception):
    """The gate stopped the run; its events (evidence, run_finished) are already emitted."""

    def __init__(self, trip: GateTrip) -> None:
        self.trip = trip
        super().__init__(trip.message)

    @property
    def exit_code(self) -> int:
        return EXIT_GATE_PAUSED if self.trip.action == "pause" else EXIT_GATE_FAILED


class HealthGate:
    def __init__(self, spec: HealthGateSpec) -> None:
        self.spec = spec
        self.window: deque[_Seen] = deque(maxlen=spec.window_rollouts)

    def observe(self, *, step: int, code: str | None, seq: int | None = None) -> None:
        self.window.append(_Seen(step, code, seq))

    def check(self, step: int) -> GateTrip | None:
        """The trip if the window's harness error rate is above the threshold (off when it is null)."""
        threshold = self.spec.max_window_harness_error_rate
        if threshold is None or not self.window:
            return None
        bad = [seen for seen in self.window if seen.code is not None]
        rate = len(bad) / len(self.window)
        if rate <= threshold:
            return None
        by_code = Counter(seen.code for seen in bad)
        return GateTrip(
            action=self.spec.on_trip,
            step=step,
            rate=rate,
            threshold=threshold,
            rollouts=len(self.window),
            window_rollouts=self.spec.window_rollouts,
            harness_errors=len(bad),
            by_code=dict(by_code.most_common()),
            seqs=[seen.seq for seen in bad if seen.seq is not None][-MAX_EVIDENCE_SEQS:],
            first_step=self.window[0].step,
            last_step=self.window[-1].step,
        )
