"""The per-run ingest token: derived from SECRET_KEY and the run's uuid, so nothing secret is stored.

The dispatcher hands it to the engine (PRACTICUM_EVENTS_TOKEN in the Ray job's environment); the
ingest endpoint recomputes it and compares in constant time. Rotating SECRET_KEY invalidates the
tokens of running runs, which is the point of rotating it.
"""

from __future__ import annotations

import hashlib
import hmac

from django.conf import settings

from .models import Run


def run_ingest_token(run: Run) -> str:
    message = f"practicum-run-ingest:{run.uuid}".encode()
    return hmac.new(settings.SECRET_KEY.encode(), message, hashlib.sha256).hexdigest()


def ingest_token_matches(run: Run, presented: str) -> bool:
    return hmac.compare_digest(run_ingest_token(run), presented)
