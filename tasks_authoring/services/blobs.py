"""Content-addressed storage: files stream through a temporary file while they are hashed, never whole in memory."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.core.files import File
from django.core.files.storage import default_storage
from django.db import IntegrityError, transaction

from ..errors import WorldFileError
from ..extraction import detect_kind
from ..models import Blob, blob_upload_to

CHUNK_BYTES = 1024 * 1024


@dataclass
class StagedFile:
    path: Path
    sha256: str
    size: int
    kind: str
    mime_type: str


def _chunks(source: Any) -> Iterator[bytes]:
    if hasattr(source, "chunks"):
        if hasattr(source, "seek"):
            source.seek(0)
        yield from source.chunks(CHUNK_BYTES)
        return
    while True:
        block = source.read(CHUNK_BYTES)
        if not block:
            return
        yield block


@contextmanager
def staged_file(source: Any, *, name: str, max_bytes: int, limit_name: str) -> Iterator[StagedFile]:
    """Copies `source` (an UploadedFile or a binary file object) to a temporary file, hashing as it goes.

    Stops as soon as the size passes `max_bytes`, so a huge upload costs at most one chunk past the limit.
    """
    digest = hashlib.sha256()
    size = 0
    handle, temp_name = tempfile.mkstemp(prefix="practicum-upload-")
    path = Path(temp_name)
    try:
        with os.fdopen(handle, "wb") as out:
            for block in _chunks(source):
                size += len(block)
                if size > max_bytes:
                    raise WorldFileError(
                        f"{name} is larger than {max_bytes:,} bytes ({limit_name})", path=name
                    )
                digest.update(block)
                out.write(block)
        kind, mime_type = detect_kind(path, name)
        yield StagedFile(path=path, sha256=digest.hexdigest(), size=size, kind=kind, mime_type=mime_type)
    finally:
        path.unlink(missing_ok=True)


def blob_store(*, staged: StagedFile) -> tuple[Blob, bool]:
    """The Blob holding these bytes, writing them to storage only when no blob has them yet."""
    existing = Blob.objects.filter(sha256=staged.sha256).first()
    if existing is not None:
        return existing, False
    blob = Blob(sha256=staged.sha256, size=staged.size, mime_type=staged.mime_type)
    name = blob_upload_to(blob, "")
    if default_storage.exists(name):
        # Same name means same bytes: a file left by a rolled-back import can be reused as is.
        blob.content.name = name
    else:
        with staged.path.open("rb") as handle:
            saved = default_storage.save(name, File(handle, name=name))
        if saved != name:
            default_storage.delete(saved)
            raise WorldFileError(f"storage refused the blob name {name} (saved as {saved})")
        blob.content.name = name
    try:
        with transaction.atomic():
            blob.save(force_insert=True)
    except IntegrityError:
        # Another upload stored the same bytes at the same moment.
        return Blob.objects.get(sha256=staged.sha256), False
    return blob, True


def blob_delete_unreferenced(names: list[str]) -> None:
    """Deletes stored files whose Blob row does not exist (rolled back); used after a refused import."""
    for name in names:
        sha256 = name.rsplit("/", 1)[-1]
        if not Blob.objects.filter(sha256=sha256).exists():
            default_storage.delete(name)


@contextmanager
def blob_local_path(blob: Blob) -> Iterator[Path]:
    """A local file with the blob's bytes: the stored file itself on disk storage, else a temporary copy."""
    try:
        local = default_storage.path(blob.content.name)
    except NotImplementedError:
        local = None
    if local is not None:
        yield Path(local)
        return
    handle, temp_name = tempfile.mkstemp(prefix="practicum-blob-")
    try:
        with os.fdopen(handle, "wb") as out, default_storage.open(blob.content.name, "rb") as source:
            shutil.copyfileobj(source, out, CHUNK_BYTES)
        yield Path(temp_name)
    finally:
        Path(temp_name).unlink(missing_ok=True)


def blob_copy_to(blob: Blob, destination: Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    with default_storage.open(blob.content.name, "rb") as source, destination.open("wb") as out:
        shutil.copyfileobj(source, out, CHUNK_BYTES)
