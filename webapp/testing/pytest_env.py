"""Loaded by pytest (`-p webapp.testing.pytest_env`) before Django settings are read.

Tests keep their state (SQLite test database, file-system broker queues, media) in var/test, apart
from a demo that may be running from the same checkout.
"""

import os
from pathlib import Path

os.environ.setdefault("PRACTICUM_VAR_DIR", str(Path(__file__).resolve().parents[2] / "var" / "test"))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
