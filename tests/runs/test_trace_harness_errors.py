"""The harness-errors pages: counts by code, messages grouped by signature, tasks hit, links to the traces."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from runs.harness_selectors import message_signature, signature_search
from tests.runs.trace_helpers import ingest, make_world

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(expert, researcher, reviewer, make_user):
    world = make_world(expert=expert, researcher=researcher, reviewer=reviewer, make_user=make_user)
    a, b = world.runs["a"], world.runs["b"]
    q0, z = world.versions["q0"], world.versions["z"]
    for seconds, name in ((30, "a.pdf"), (31.5, "reports/b.pdf"), (45, "c.pdf")):
        ingest(
            a,
            q0,
            outcome="harness_error",
            code="TOOL_TIMEOUT",
            message=f"read_pdf hung after {seconds} s on '{name}'",
        )
    ingest(
        a, z, outcome="harness_error", code="SANDBOX_START", message="bwrap: can't mount /tmp/sbx-1f3a9c2e77"
    )
    ingest(
        b, z, outcome="harness_error", code="SANDBOX_START", message="bwrap: can't mount /tmp/sbx-0b1c2d3e4f"
    )
    ingest(a, q0)
    return world


def test_signatures_ignore_numbers_paths_ids_and_names():
    assert message_signature("read_pdf hung after 30 s on 'a.pdf'") == message_signature(
        "read_pdf hung after 31.5 s on 'b.pdf'"
    )
    assert message_signature("bwrap: can't mount /tmp/sbx-1f3a9c2e77") == "bwrap: can't mount <path>"
    assert message_signature("worker 0x7f3a died, job 3fa85f64-5717-4562-b3fc-2c963f66afa6") == (
        "worker <hex> died, job <id>"
    )
    assert signature_search("read_pdf hung after <n> s on '<name>'") == "read_pdf hung after"


def test_the_run_page_groups_messages_and_counts_codes(client, world):
    a = world.runs["a"]
    client.force_login(world.users["reviewer"])
    response = client.get(reverse("runs:run_harness_errors", args=[a.pk]))
    body = response.content.decode()
    assert response.status_code == 200
    assert "4 harness errors" in body
    assert "read_pdf hung after &lt;n&gt; s on &#x27;&lt;name&gt;&#x27;" in body
    assert (
        f"run={a.pk}&amp;outcome=harness_error&amp;error_code=TOOL_TIMEOUT&amp;q=read_pdf+hung+after" in body
    )
    chart = json.loads(response.context["chart"] and json.dumps(response.context["chart"]))
    assert {series["label"]: sum(series["values"]) for series in chart["series"]} == {
        "SANDBOX_START": 1,
        "TOOL_TIMEOUT": 3,
    }


def test_a_group_link_lists_exactly_its_traces(client, world):
    a = world.runs["a"]
    client.force_login(world.users["reviewer"])
    group = next(
        g
        for g in client.get(reverse("runs:run_harness_errors", args=[a.pk])).context["overview"]["groups"]
        if g["code"] == "TOOL_TIMEOUT"
    )
    assert group["count"] == 3 and group["tasks"] == [(group["example"]["task_name"], 3)]
    listed = client.get(reverse("runs:trace_list") + "?" + group["query"]).context["page"]
    assert listed.count == 3


def test_across_runs_counts_every_visible_run(client, world):
    client.force_login(world.users["reviewer"])
    overview = client.get(reverse("runs:harness_errors")).context["overview"]
    codes = {code["error_code"]: (code["count"], code["runs"]) for code in overview["codes"]}
    assert codes == {"TOOL_TIMEOUT": (3, 1), "SANDBOX_START": (2, 2)}
    sandbox = next(g for g in overview["groups"] if g["code"] == "SANDBOX_START")
    assert sandbox["count"] == 2 and sandbox["runs"] == 2


def test_an_expert_sees_only_their_own_tasks_errors(client, world):
    client.force_login(world.users["expert"])
    overview = client.get(reverse("runs:harness_errors")).context["overview"]
    assert [code["error_code"] for code in overview["codes"]] == ["TOOL_TIMEOUT"]
    client.force_login(world.users["other_expert"])
    overview = client.get(reverse("runs:harness_errors")).context["overview"]
    assert [code["error_code"] for code in overview["codes"]] == ["SANDBOX_START"]


def test_a_run_without_harness_errors_says_so(client, world, researcher):
    from tests.runs.factories import make_run

    quiet = make_run(user=researcher, task_set=world.runs["a"].task_set, kind="eval", name="Quiet")
    client.force_login(world.users["reviewer"])
    body = client.get(reverse("runs:run_harness_errors", args=[quiet.pk])).content.decode()
    assert "No harness errors in this run" in body
