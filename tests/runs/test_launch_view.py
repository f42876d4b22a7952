"""The launch form: presets, clone, the spec's fields and JSON view, inline errors, the preview of counts."""

from __future__ import annotations

import pytest
from django.urls import reverse

from runs.forms import PRESETS, SPEC_PATHS, default_spec, merge, spec_json
from runs.models import Run
from tests.runs.factories import make_run

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_dispatch(monkeypatch):
    """The view tests launch without a worker: what dispatch does is the dispatch tests' business."""
    monkeypatch.setattr("runs.services.launch._enqueue", lambda name, pk: None)


# These tests are not about the health gate (tests/runs/test_launch_gate.py): its eval half is off.
GATE_OFF = {"health_gate": {"max_eval_harness_error_rate": None}}


def _post_data(task_set, *, kind="eval", split="eval", spec=None, **fields) -> dict:
    """What the browser posts: every field of the form with the spec's values, and the JSON view."""
    spec = spec or default_spec(kind)
    data = {"name": "", "kind": kind, "task_set": task_set.pk, "split": split, "spec_json": spec_json(spec)}
    for path in SPEC_PATHS:
        node = spec
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, bool):
            if node:
                data[path] = "on"
        elif isinstance(node, list):
            data[path] = ", ".join(str(item) for item in node)
        else:
            data[path] = "" if node is None else str(node)
    data.update(fields)
    return data


def test_the_form_offers_every_preset_and_the_spec_fields(client, researcher, two_task_set):
    client.force_login(researcher)
    page = client.get(reverse("runs:run_new")).content.decode()
    for _, (label, _, _) in PRESETS.items():
        assert label in page
    assert 'name="batch.prompts_per_step"' in page and 'name="algorithm.loss_reduction"' in page
    assert "the group size n" in page  # the schema's description under its field
    assert "Two questions" in page


def test_a_preset_fills_kind_and_spec(client, researcher, two_task_set):
    client.force_login(researcher)
    response = client.get(reverse("runs:run_new"), {"preset": "train-toy-grpo", "task_set": two_task_set.pk})
    assert response.context["form"]["kind"].value() == "train"
    fields = {f.path: f for section in response.context["sections"] for f in section["fields"]}
    assert fields["model.builtin"].value == "tiny-llama"
    assert fields["batch.samples_per_prompt"].value == 4
    assert fields["max_steps"].value == 10


def test_launching_an_oracle_eval_creates_the_run_and_opens_its_page(client, researcher, two_task_set):
    client.force_login(researcher)
    spec = merge(default_spec("eval"), {"agent": "oracle"})
    response = client.post(reverse("runs:run_new"), _post_data(two_task_set, spec=spec, name="Oracle check"))
    run = Run.objects.get(name="Oracle check")
    assert response.status_code == 302 and response["Location"] == reverse("runs:run_detail", args=[run.pk])
    assert run.kind == "eval" and run.spec["agent"] == "oracle" and run.spec["model"] is None
    assert run.rollouts_expected == 1  # one eval task, one sample
    assert run.launched_by == researcher


def test_every_problem_is_shown_under_its_field(client, researcher, two_task_set):
    client.force_login(researcher)
    spec = merge(default_spec("train"), {**GATE_OFF, "model": {"builtin": "tiny-llama"}})
    data = _post_data(two_task_set, kind="train", split="train", spec=spec)
    data.update({"batch.prompts_per_step": "3", "batch.mini_batches": "2", "optimizer.lr": "-1"})
    response = client.post(reverse("runs:run_new"), data)
    assert response.status_code == 400
    fields = {f.path: f for section in response.context["sections"] for f in section["fields"]}
    assert "must divide prompts_per_step (3)" in " ".join(fields["batch.mini_batches"].errors)
    assert "greater than or equal to 0" in " ".join(fields["optimizer.lr"].errors)
    assert not Run.objects.exists()
    page = response.content.decode()
    assert 'id="err-f-batch-mini_batches"' in page and "must divide prompts_per_step" in page


def test_a_model_run_without_a_model_is_refused_at_the_model_field(client, researcher, two_task_set):
    client.force_login(researcher)
    response = client.post(reverse("runs:run_new"), _post_data(two_task_set, spec=default_spec("eval")))
    fields = {f.path: f for section in response.context["sections"] for f in section["fields"]}
    assert "needs a model" in " ".join(fields["model.builtin"].errors)


def test_a_cross_section_problem_is_shown_under_the_field_it_names(client, researcher, two_task_set):
    client.force_login(researcher)
    spec = merge(default_spec("train"), {**GATE_OFF, "model": {"builtin": "tiny-llama"}})
    spec["batch"]["samples_per_prompt"] = 1
    data = _post_data(two_task_set, kind="train", split="train", spec=spec)
    response = client.post(reverse("runs:run_new"), data)
    fields = {f.path: f for section in response.context["sections"] for f in section["fields"]}
    assert "at least 2 samples per prompt" in " ".join(fields["batch.samples_per_prompt"].errors)


def test_the_json_view_can_be_launched_as_it_is(client, researcher, two_task_set):
    client.force_login(researcher)
    data = _post_data(two_task_set)
    data.update(use_json="on", spec_json='{"kind": "eval", "agent": "null", "seed": 5}', name="From JSON")
    assert client.post(reverse("runs:run_new"), data).status_code == 302
    run = Run.objects.get(name="From JSON")
    assert run.spec["agent"] == "null" and run.spec["seed"] == 5


def test_invalid_json_is_named_at_the_top(client, researcher, two_task_set):
    client.force_login(researcher)
    data = _post_data(two_task_set)
    data.update(use_json="on", spec_json="{nope")
    response = client.post(reverse("runs:run_new"), data)
    assert response.status_code == 400
    assert any("not valid JSON" in message for message in response.context["top_errors"])


def test_the_preview_counts_tasks_steps_and_rollouts(client, researcher, two_task_set):
    client.force_login(researcher)
    spec = merge(default_spec("train"), {**GATE_OFF, "model": {"builtin": "tiny-llama"}, "max_steps": 3})
    spec["batch"] = {**spec["batch"], "prompts_per_step": 2, "samples_per_prompt": 4}
    spec["evaluation"] = {**spec["evaluation"], "at_start": True, "every_steps": 0}
    data = _post_data(two_task_set, kind="train", split="train", spec=spec)
    response = client.post(reverse("runs:run_new_preview"), data, headers={"HX-Request": "true"})
    html = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in html
    assert "data-preview-rollouts>25<" in html  # 3 steps × 2 prompts × 4 samples + 1 evaluation of 1 task
    assert 'hx-swap-oob="true"' in html  # field errors and the JSON view are refreshed in place


def test_the_preview_lists_the_problems(client, researcher, two_task_set):
    client.force_login(researcher)
    data = _post_data(two_task_set, spec=default_spec("eval"))
    html = client.post(reverse("runs:run_new_preview"), data).content.decode()
    assert "Fix the problems" in html
    assert "needs a model" in html


def test_clone_prefills_from_an_earlier_run(client, researcher, two_task_set):
    source = make_run(
        user=researcher, task_set=two_task_set, kind="train", status="succeeded", name="Baseline"
    )
    client.force_login(researcher)
    response = client.get(reverse("runs:run_new"), {"clone": source.pk})
    form = response.context["form"]
    assert form["kind"].value() == "train" and form["name"].value() == "Clone of Baseline"
    assert form["cloned_from"].value() == source.pk
    fields = {f.path: f for section in response.context["sections"] for f in section["fields"]}
    assert fields["batch.samples_per_prompt"].value == 4 and fields["optimizer.lr"].value == 1e-4


def test_cloning_a_run_the_user_may_not_read_is_not_found(client, researcher, make_user, two_task_set):
    other = make_user("rob_researcher", "researcher")
    source = make_run(user=other, task_set=two_task_set, kind="eval", status="succeeded")
    client.force_login(researcher)
    assert client.get(reverse("runs:run_new"), {"clone": source.pk}).status_code == 404
