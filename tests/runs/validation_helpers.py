"""Validations for tests that approve task versions without running the engine (docs/quality.md, "Tests")."""

from __future__ import annotations

from django.utils import timezone

from rl_engine.validate import LABELS
from runs.models import ValidationStatus, VersionValidation

PASSED_KEYS = (
    "world_files",
    "tools_listed",
    "tools_answer",
    "oracle_passes",
    "null_fails",
    "golden_meets_criteria",
    "empty_answer_fails",
)


def checks(failed: dict[str, str] | None = None) -> list[dict]:
    """A checklist as ingestion stores it; `failed` maps item keys to their reasons."""
    failed = failed or {}
    return [
        {
            "key": key,
            "label": LABELS[key],
            "ok": key not in failed,
            "reason": failed.get(key, "ok"),
            "rollout_id": None,
        }
        for key in PASSED_KEYS
    ]


def validation_finished(version, *, failed: dict[str, str] | None = None) -> VersionValidation:
    """Ends the version's latest validation (the one submitting requested) as if its run had reported:
    passed, or failed with the given items. The run itself is dropped (the validation keeps no
    evidence), so tests that count runs see only their own."""
    validation = version.validations.order_by("-created_at", "-pk").first()
    assert validation is not None, f"{version} was never submitted, so it has no validation"
    run = validation.run
    validation.run = None
    validation.checks = checks(failed)
    validation.status = ValidationStatus.FAILED if failed else ValidationStatus.PASSED
    validation.finished_at = timezone.now()
    validation.save(update_fields=["run", "checks", "status", "finished_at"])
    if run is not None:
        run.delete()
    return validation
