"""Task list server time and query count with 5,000 tasks and 50,000 world files.

Seeds a throwaway SQLite database (a temporary folder, never var/), then requests the task list
through Django's full request stack (middleware, view, selector, template) and prints p50/p95
server time and the number of queries per page. Target: p95 ≤ 150 ms, the same query count on
every page. Run: .venv/bin/python bench/task_list.py [--tasks 5000] [--files-per-task 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _setup_django(var_dir: Path) -> None:
    os.environ["PRACTICUM_VAR_DIR"] = str(var_dir)
    os.environ.pop("DATABASE_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _seed(task_count: int, files_per_task: int) -> dict:
    from django.contrib.auth.models import Group, User
    from django.db import transaction

    from tasks_authoring.models import Blob, Criterion, Domain, Task, TaskVersion, WorldFile

    started = time.perf_counter()
    hasher = "md5$bench$" + "0" * 22  # never used to log in; the client uses force_login
    users = {}
    for name, role in (("erin", "expert"), ("ed", "expert"), ("rhea", "researcher"), ("remy", "reviewer")):
        user = User.objects.create(username=name, password=hasher)
        user.groups.add(Group.objects.get(name=role))
        users[name] = user
    domains = list(Domain.objects.all())
    statuses = ["approved"] * 6 + ["draft", "in_review", "changes_requested", "archived"]
    with transaction.atomic():
        tasks = Task.objects.bulk_create(
            Task(
                slug=f"task-{number}",
                title=f"{domains[number % len(domains)].name} task {number}: reconcile the Q{number % 4 + 1} figures",
                domain=domains[number % len(domains)],
                owner=users["erin"] if number % 2 else users["ed"],
                status=statuses[number % len(statuses)],
            )
            for number in range(task_count)
        )
        versions = TaskVersion.objects.bulk_create(
            TaskVersion(
                task=task,
                number=1,
                instruction=f"Using the workbook, compute the adjusted growth for region {task.pk % 17}.",
                state=task.status,
                created_by=task.owner,
            )
            for task in tasks
        )
        blob_count = task_count * files_per_task
        Blob.objects.bulk_create(
            (Blob(sha256=f"{number:064x}", size=1000 + number, content=f"blobs/{number:064x}", mime_type="text/plain")
             for number in range(blob_count)),
            batch_size=2000,
        )  # fmt: skip
        WorldFile.objects.bulk_create(
            (
                WorldFile(
                    version=version,
                    path=f"folder{index % 3}/file{index}.txt",
                    blob_id=f"{(position * files_per_task + index):064x}",
                    kind="text",
                    extraction_status="done",
                )
                for position, version in enumerate(versions)
                for index in range(files_per_task)
            ),
            batch_size=2000,
        )
        Criterion.objects.bulk_create(
            (
                Criterion(
                    version=version, order=order, key=f"c{order + 1}", text="States a fact", kind="llm_judge"
                )
                for version in versions
                for order in range(3)
            ),
            batch_size=2000,
        )
    return {"users": users, "seconds": time.perf_counter() - started}


def _measure(client, url: str, repeats: int) -> tuple[list[float], list[int]]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.get(url)  # warm caches (templates, session, roles)
    times, queries = [], []
    for _ in range(repeats):
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            response = client.get(url)
            times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (url, response.status_code)
        queries.append(len(captured))
    return times, queries


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--files-per-task", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="practicum-bench-") as temp:
        _setup_django(Path(temp))
        from django.test import Client
        from django.test.utils import setup_test_environment

        setup_test_environment()  # lets the test client run against this throwaway database
        seeded = _seed(args.tasks, args.files_per_task)
        print(
            f"seeded {args.tasks:,} tasks and {args.tasks * args.files_per_task:,} files in {seeded['seconds']:.1f} s"
        )
        cases = [
            ("researcher", "/tasks/"),
            ("researcher", "/tasks/?page=2"),
            ("researcher", "/tasks/?page=40"),
            ("researcher", "/tasks/?sort=title&page=10"),
            ("researcher", "/tasks/?domain=law&status=approved"),
            ("researcher", "/tasks/?q=region+7"),
            ("expert", "/tasks/"),
            ("expert", "/tasks/?owner=erin&status=draft"),
        ]
        users = {"researcher": seeded["users"]["rhea"], "expert": seeded["users"]["erin"]}
        print(f"{'persona':<11} {'url':<40} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8}")
        all_times, query_counts = [], set()
        for persona, url in cases:
            client = Client()
            client.force_login(users[persona])
            times, queries = _measure(client, url, args.repeats)
            all_times += times
            query_counts.update(queries)
            print(
                f"{persona:<11} {url:<40} {statistics.median(times):8.1f} {_percentile(times, 0.95):8.1f} "
                f"{'/'.join(map(str, sorted(set(queries)))):>8}"
            )
        print(
            f"all pages: p50 {statistics.median(all_times):.1f} ms, p95 {_percentile(all_times, 0.95):.1f} ms; "
            f"queries per page: {sorted(query_counts)} (target p95 ≤ 150 ms, constant queries)"
        )


if __name__ == "__main__":
    main()
