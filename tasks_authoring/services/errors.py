"""The service errors, importable from here too (they live in tasks_authoring.errors to avoid an import cycle)."""

from ..errors import AuthoringError, CriterionError, NotAllowed, ReadOnlyVersion, SubmitError, WorldFileError

__all__ = [
    "AuthoringError",
    "CriterionError",
    "NotAllowed",
    "ReadOnlyVersion",
    "SubmitError",
    "WorldFileError",
]
