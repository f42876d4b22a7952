"""Errors the services raise; each message names the problem so the web layer can show it as is."""

from __future__ import annotations


class AuthoringError(ValueError):
    """Base of every refusal by the authoring services."""


class NotAllowed(AuthoringError):
    """The user may not do this to this object (views turn it into 404 or a message)."""


class ReadOnlyVersion(AuthoringError):
    """The version is submitted, approved or archived: it never changes again."""


class WorldFileError(AuthoringError):
    """A world file was refused: a bad name, a clash, or a limit; `path` names the file."""

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class CriterionError(AuthoringError):
    """A rubric criterion was refused; `field` names the form field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class SubmitError(AuthoringError):
    """A version is not ready for review; `problems` lists every reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems
