"""A small world for the trace tests: two experts' tasks, two researchers' runs, rollouts fed through ingestion.

Rollouts go in as the engine sends them (`events_ingest`), so the summary row, the body and the
search text are what production stores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runs.models import Rollout, Run
from runs.services.ingest import events_ingest
from runs.services.search_index import rollout_search_index
from tasks_authoring.services.task_sets import task_set_create
from tests.runs.event_builders import event, rollout_payload
from tests.runs.factories import bundle_name, make_run
from tests.tasks_authoring.data_helpers import approve, draft_with_rubric


@dataclass
class TraceWorld:
    users: dict[str, Any]
    versions: dict[str, Any]  # "q0", "q1" (the expert's), "z" (another expert's)
    runs: dict[str, Run]  # "a" (the researcher's), "b" (another researcher's)
    rollouts: dict[str, Rollout] = field(default_factory=dict)


def make_world(*, expert, researcher, reviewer, make_user) -> TraceWorld:
    other_expert = make_user("ezra_expert", "expert")
    other_researcher = make_user("rob_researcher", "researcher")
    versions = {
        "q0": approve(draft_with_rubric(expert, title="Revenue question"), expert, reviewer),
        "q1": approve(draft_with_rubric(expert, title="Margin question"), expert, reviewer),
        "z": approve(draft_with_rubric(other_expert, title="Zeta question"), other_expert, reviewer),
    }
    task_set = task_set_create(
        owner=researcher, name="Trace set", versions=list(versions.values()), eval_fraction=0.5, seed=7
    )
    runs = {
        "a": make_run(user=researcher, task_set=task_set, kind="eval", status="succeeded", name="Run A"),
        "b": make_run(
            user=other_researcher, task_set=task_set, kind="eval", status="succeeded", name="Run B"
        ),
    }
    users = {
        "expert": expert,
        "other_expert": other_expert,
        "researcher": researcher,
        "other_researcher": other_researcher,
        "reviewer": reviewer,
    }
    return TraceWorld(users=users, versions=versions, runs=runs)


def ingest(run: Run, version, *, text: str = "", turns: int = 2, turn_list=None, **fields: Any) -> Rollout:
    """One rollout of `version` in `run`, through ingestion; `text` goes into the first turn's message."""
    payload = rollout_payload(bundle_name(version), version.content_hash, turns=turns, **fields)
    if turn_list is not None:
        payload["turns"] = turn_list
    elif text:
        payload["turns"][0]["content"] = text
    seq = run.last_seq + 1
    result = events_ingest(run=run, events=[event(run, seq, "rollout", payload)])
    assert result.accepted == 1, result.rejected
    run.refresh_from_db()
    rollout = Rollout.objects.get(run=run, seq=seq)
    # What the search-index task does once the batch commits (these tests' transactions never do).
    rollout_search_index(rollout_ids=[rollout.pk])
    return rollout
