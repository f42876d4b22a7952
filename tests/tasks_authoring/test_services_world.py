"""World files: streamed upload, limits, names, clashes, moves, deletes, extraction (also via a real worker)."""

from __future__ import annotations

import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from tasks_authoring import services
from tasks_authoring.models import Blob, WorldFile
from tasks_authoring.services import ReadOnlyVersion, WorldFileError
from tests.tasks_authoring.data_helpers import approve, draft_with_rubric, pdf_bytes, xlsx_bytes

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


@pytest.fixture
def version(expert):
    return services.task_create(owner=expert, title="World test", domain="law").latest_version


def _upload(version, user, path, data: bytes):
    return services.world_file_upload(version=version, user=user, path=path, uploaded=io.BytesIO(data))


def test_an_upload_is_stored_content_addressed_and_deduplicated(version, expert, media):
    first = _upload(version, expert, "a/report.pdf", pdf_bytes(["one"]))
    second = _upload(version, expert, "b/copy.pdf", pdf_bytes(["one"]))
    assert first.blob_id == second.blob_id and Blob.objects.count() == 1
    assert first.kind == "pdf" and first.extraction_status == "pending"
    assert first.blob.content.name == f"blobs/{first.blob_id[:2]}/{first.blob_id[2:4]}/{first.blob_id}"
    assert (media / first.blob.content.name).read_bytes() == pdf_bytes(["one"])


def test_a_django_uploaded_file_is_read_in_chunks(version, expert):
    uploaded = SimpleUploadedFile("model.xlsx", xlsx_bytes())
    world_file = services.world_file_upload(
        version=version, user=expert, path="model.xlsx", uploaded=uploaded
    )
    assert world_file.kind == "xlsx" and world_file.blob.size == len(xlsx_bytes())


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("x" * 300 + ".txt", "characters long; the limit is 200 (WORLD_MAX_PATH_LENGTH)"),
        ("bell\x07.txt", "contains control characters (U+0007)"),
        ("evil\u202etxt.exe", "contains control characters (U+202E)"),
        ("../escape.txt", "'..' is not a valid file or folder name"),
        ("/abs.txt", "the path '/abs.txt' is absolute"),
        ("a//b.txt", "has an empty folder name"),
        ("win\\name.txt", "contains \\, which file names cannot hold"),
        ("/".join("d" * 10) + "/f.txt", "is 10 folders deep; the limit is 8 (WORLD_MAX_PATH_DEPTH)"),
    ],
)
def test_a_bad_name_is_refused_naming_the_rule(version, expert, path, message):
    with pytest.raises(WorldFileError, match=None) as error:
        _upload(version, expert, path, b"x")
    assert message in str(error.value)
    assert not WorldFile.objects.exists()


def test_names_are_normalised_to_nfc(version, expert):
    world_file = _upload(version, expert, " cafe\u0301/notes.txt ", b"x")
    assert world_file.path == "caf\u00e9/notes.txt"


def test_a_clash_is_refused_with_a_message(version, expert):
    _upload(version, expert, "notes.txt", b"x")
    with pytest.raises(
        WorldFileError, match="a file named 'notes.txt' already exists; rename or delete it first"
    ):
        _upload(version, expert, "notes.txt", b"y")
    with pytest.raises(WorldFileError, match="'notes.txt' is a file, so it cannot also be a folder"):
        _upload(version, expert, "notes.txt/inner.txt", b"y")


def test_limits_name_the_limit_and_the_file(version, expert, settings):
    settings.WORLD_MAX_FILE_BYTES = 10
    with pytest.raises(WorldFileError, match=r"big.txt is larger than 10 bytes \(WORLD_MAX_FILE_BYTES\)"):
        _upload(version, expert, "big.txt", b"x" * 11)
    settings.WORLD_MAX_FILE_BYTES = 100
    settings.WORLD_MAX_TASK_BYTES = 15
    _upload(version, expert, "a.txt", b"x" * 10)
    with pytest.raises(WorldFileError, match="WORLD_MAX_TASK_BYTES"):
        _upload(version, expert, "b.txt", b"x" * 6)
    settings.WORLD_MAX_FILES = 1
    with pytest.raises(WorldFileError, match=r"already holds 1 files, the limit \(WORLD_MAX_FILES\)"):
        _upload(version, expert, "c.txt", b"x")
    assert list(WorldFile.objects.values_list("path", flat=True)) == ["a.txt"]


def test_hostile_uploads_are_stored_with_a_readable_error(version, expert):
    cases = {
        "empty.txt": (b"", "could not read: the file is empty (0 bytes)"),
        "broken.pdf": (b"%PDF-1.4\ngarbage", "could not read: not a valid PDF: "),
        "broken.xlsx": (b"PK\x03\x04garbage", None),
        "fake.pdf": (b"plain text pretending\n", None),
    }
    for path, (data, _) in cases.items():
        world_file = _upload(version, expert, path, data)
        services.world_file_extract(world_file_id=world_file.pk)
    files = {f.path: f for f in WorldFile.objects.all()}
    for path, (_, error) in cases.items():
        if error:
            assert files[path].extraction_status == "failed"
            assert files[path].extraction_error.startswith(error)
    assert files["broken.xlsx"].kind == "other"  # a zip without a workbook inside
    fake = files["fake.pdf"]
    assert (fake.kind, fake.extraction_status) == ("text", "done")
    assert (
        fake.preview["warning"]
        == "the name ends in .pdf but the content is text; the file is treated as what it contains"
    )


def test_move_renames_and_refuses_a_clash(version, expert):
    notes = _upload(version, expert, "notes.txt", b"x")
    _upload(version, expert, "other.txt", b"y")
    services.world_file_move(world_file=notes, user=expert, new_path="archive/notes.md")
    notes.refresh_from_db()
    assert (notes.path, notes.kind, notes.extraction_status) == ("archive/notes.md", "markdown", "pending")
    with pytest.raises(WorldFileError, match="a file named 'other.txt' already exists"):
        services.world_file_move(world_file=notes, user=expert, new_path="other.txt")
    assert services.world_folder_move(version=version, user=expert, folder="archive", new_folder="old") == 1
    assert set(WorldFile.objects.values_list("path", flat=True)) == {"old/notes.md", "other.txt"}


def test_delete_keeps_the_shared_blob(version, expert):
    world_file = _upload(version, expert, "notes.txt", b"x")
    services.world_file_delete(world_file=world_file, user=expert)
    assert not WorldFile.objects.exists() and Blob.objects.count() == 1


def test_approved_versions_refuse_every_change_even_from_an_admin(expert, reviewer, admin_user):
    version = approve(draft_with_rubric(expert), expert, reviewer)
    world_file = version.world_files.get()
    for user in (expert, admin_user):
        with pytest.raises(ReadOnlyVersion, match=r"v1 is approved and read-only; open a new draft version"):
            _upload(version, user, "new.txt", b"x")
        with pytest.raises(ReadOnlyVersion):
            services.world_file_move(world_file=world_file, user=user, new_path="moved.txt")
        with pytest.raises(ReadOnlyVersion):
            services.world_file_delete(world_file=world_file, user=user)


def test_another_expert_may_not_touch_a_draft(version, make_user):
    with pytest.raises(services.NotAllowed):
        _upload(version, make_user("eve_expert", "expert"), "x.txt", b"x")


def test_extraction_of_a_deleted_file_is_a_no_op(version, expert):
    world_file = _upload(version, expert, "notes.txt", b"x")
    world_file_id = world_file.pk
    world_file.delete()
    assert services.world_file_extract(world_file_id=world_file_id) is None


def test_upload_enqueues_extraction_after_the_commit(version, expert, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        _upload(version, expert, "notes.txt", b"x")
    assert len(callbacks) == 1
