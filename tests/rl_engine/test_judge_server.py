"""The built-in judge: `python -m rl_engine.judge_server` started as a real process on a free port,
graded against through the real `rl_engine.grading` path. A tiny random model (built offline)
checks the plumbing and the determinism; SmolLM2-135M-Instruct checks the real model end to end.
A random model's verdicts are not judged for correctness, only for shape."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from rl_engine.bundle import Criterion, Rubric
from rl_engine.grading import JudgeConfig, grade
from rl_engine.grading.checks import VERDICT_SCHEMA, judge_messages, parse_verdict
from rl_engine.judge_server import fit_prompt, judge_verdict, load_model, main
from rl_engine.models import SMOLLM2, ModelUnavailable, builtin_model, smollm2_gguf
from webapp.devstack import stop_process_group
from webapp.testing.services import service_missing

READY = re.compile(r"judge (\S+) ready at (http://\S+)")
ANSWER = "Adjusted APAC growth was 12.5% against a 15% target, so the target is not met."


@contextmanager
def judge_process(
    model: str, log: Path, *, env: dict[str, str], timeout: float = 300
) -> Iterator[tuple[str, str]]:
    """(served model name, base URL) of a judge server process, stopped afterwards."""
    command = [sys.executable, "-m", "rl_engine.judge_server", "--model", model, "--port", "0"]
    with open(log, "wb") as sink:
        process = subprocess.Popen(
            [*command, "--threads", "1", "--log-level", "warning"],
            env={**os.environ, "HF_HUB_OFFLINE": "1", **env},
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout
        while not (ready := READY.search(log.read_text(errors="replace"))):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the judge server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield ready.group(1), ready.group(2)
    finally:
        stop_process_group(process)


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory) -> Path:
    return builtin_model("tiny-llama", cache_dir=tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def tiny_judge(tiny_folder, tmp_path_factory) -> Iterator[tuple[str, str]]:
    log = tmp_path_factory.mktemp("judge") / "server.log"
    with judge_process(str(tiny_folder), log, env={}) as served:
        yield served


def verdict_request(model: str, criterion: str = "Says the target is not met", answer: str = ANSWER) -> dict:
    """What rl_engine.grading.judge sends."""
    return {
        "model": model,
        "messages": judge_messages(criterion, answer, {}),
        "temperature": 0,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "verdict", "schema": VERDICT_SCHEMA, "strict": True},
        },
    }


def chat(url: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}/chat/completions", json=body, timeout=120)


def grade_with(name: str, url: str, rubric: Rubric, output_dir: Path, answer: str = ANSWER):
    config = JudgeConfig(base_url=url, model=name, retries=0, timeout_sec=300)
    return asyncio.run(grade(rubric, final_answer=answer, output_dir=output_dir, judge=config))


def test_models_lists_the_served_model_which_also_answers_to_default(tiny_judge):
    name, url = tiny_judge
    listed = httpx.get(f"{url}/models").json()
    assert listed["object"] == "list"
    assert [model["id"] for model in listed["data"]] == [name] == ["tiny-llama-seed0"]
    # `python -m rl_engine run --judge-url URL` sends "default" when no --judge-model is given.
    assert chat(url, verdict_request("default")).json()["model"] == name


def test_a_rubric_with_an_llm_judge_criterion_is_graded_through_the_server(tiny_judge, tmp_path):
    name, url = tiny_judge
    (tmp_path / "notes.md").write_text("APAC: 12.5% vs 15% target")
    rubric = Rubric(
        criteria=[
            Criterion(id="c1", text="Says the target is not met", kind="llm_judge", required=True),
            Criterion(id="c2", text="Mentions 12.5%", kind="contains", params={"value": "12.5%"}),
        ]
    )

    result = grade_with(name, url, rubric, tmp_path)

    judged, contains = result.verdicts
    assert judged.kind == "llm_judge" and isinstance(judged.met, bool)
    assert re.match(r"(Yes|No)\b.*\(local judge, P\(yes\) = [01]\.\d\d\)", judged.rationale)
    assert judged.rationale.startswith("Yes") == judged.met
    assert contains.met
    assert result.score == (2 if judged.met else 1) / 2
    assert result.passed == judged.met


def test_a_verdict_is_an_openai_reply_holding_valid_json_and_is_deterministic(tiny_judge):
    name, url = tiny_judge
    # Sampling settings do not move a verdict: it is a classification, not a sample.
    bodies = [verdict_request(name) | {"temperature": t} for t in (0, 0, 1.0, 1.5)]
    with ThreadPoolExecutor(len(bodies)) as pool:
        replies = [reply.json() for reply in pool.map(lambda body: chat(url, body), bodies)]

    first = replies[0]
    assert first["object"] == "chat.completion" and first["id"].startswith("chatcmpl-")
    assert first["model"] == name and isinstance(first["created"], int)
    [choice] = first["choices"]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] == "stop"
    usage = first["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert 1 <= usage["completion_tokens"] <= 49
    content = choice["message"]["content"]
    assert set(json.loads(content)) == {"rationale", "is_criteria_true"}
    assert parse_verdict(content) is not None
    assert {reply["choices"][0]["message"]["content"] for reply in replies} == {content}


def test_max_tokens_bounds_the_rationale(tiny_judge):
    name, url = tiny_judge
    reply = chat(url, verdict_request(name) | {"max_tokens": 1}).json()

    verdict = json.loads(reply["choices"][0]["message"]["content"])
    assert reply["usage"]["completion_tokens"] == 1
    assert re.fullmatch(r"(Yes|No)\. \(local judge, P\(yes\) = [01]\.\d\d\)", verdict["rationale"])


def test_plain_generation_is_deterministic_at_temperature_0_and_bounded_by_max_tokens(tiny_judge):
    name, url = tiny_judge
    body = {"model": name, "messages": [{"role": "user", "content": "Is 12.5% above 15%?"}], "max_tokens": 6}

    greedy = [chat(url, body | {"temperature": 0}).json() for _ in range(2)]
    seeded = [chat(url, body | {"temperature": 1.0, "seed": 7}).json() for _ in range(2)]

    assert greedy[0]["choices"][0]["message"]["content"] == greedy[1]["choices"][0]["message"]["content"]
    assert seeded[0]["choices"][0]["message"]["content"] == seeded[1]["choices"][0]["message"]["content"]
    for reply in greedy + seeded:
        assert reply["usage"]["completion_tokens"] <= 6
        assert reply["choices"][0]["finish_reason"] in {"stop", "length"}
        assert (reply["choices"][0]["finish_reason"] == "length") == (
            reply["usage"]["completion_tokens"] == 6
        )


def test_evidence_longer_than_the_context_window_is_clipped_with_a_note(tiny_judge, tmp_path):
    name, url = tiny_judge
    long_answer = " ".join(f"row {i}: value {i * 37 % 1000}" for i in range(3000))

    reply = chat(url, verdict_request(name, answer=long_answer))

    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["usage"]["prompt_tokens"] <= 2048
    assert "clipped" in json.loads(body["choices"][0]["message"]["content"])["rationale"]
    assert "tokens cut from the start" in body["notes"][0]


@pytest.mark.parametrize(
    ("change", "param", "says"),
    [
        ({"messages": None}, "messages", "Field required"),
        ({"messages": []}, "messages", "at least 1 item"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role", "Input should be"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "valid string"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            "messages[0].content[0].type",
            "Input should be 'text'",
        ),
        ({"max_tokens": 0}, "max_tokens", "greater than or equal to 1"),
        ({"temperature": 5}, "temperature", "less than or equal to 2"),
        ({"stream": True}, "stream", "Input should be False"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}},
            "response_format.json_schema.schema",
            "only the verdict schema",
        ),
    ],
)
def test_a_malformed_request_is_a_400_naming_the_field(tiny_judge, change, param, says):
    name, url = tiny_judge
    body = {key: value for key, value in (verdict_request(name) | change).items() if value is not None}

    reply = chat(url, body)

    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert error["message"].startswith(f"{param}: ") and says in error["message"]


def test_a_body_that_is_not_json_is_a_400(tiny_judge):
    _, url = tiny_judge
    reply = httpx.post(f"{url}/chat/completions", content=b"{not json", timeout=30)

    assert reply.status_code == 400
    assert "not JSON" in reply.json()["error"]["message"]


def test_an_unknown_model_is_a_404_naming_the_served_one(tiny_judge):
    name, url = tiny_judge
    reply = chat(url, verdict_request("gpt-judge"))

    assert reply.status_code == 404
    error = reply.json()["error"]
    assert (error["param"], error["code"]) == ("model", "model_not_found")
    assert "'gpt-judge'" in error["message"] and repr(name) in error["message"]


def test_judge_verdict_in_process_answers_what_the_server_answers(tiny_judge, tiny_folder):
    name, url = tiny_judge
    loaded = load_model(str(tiny_folder))
    messages = judge_messages("Says the target is not met", ANSWER, {})

    verdict = judge_verdict(loaded.model, loaded.tokenizer, messages)

    assert verdict == json.loads(chat(url, verdict_request(name)).json()["choices"][0]["message"]["content"])


def test_clipping_keeps_the_criterion_and_cuts_the_answer_from_the_left(tiny_folder):
    loaded = load_model(str(tiny_folder))
    answer = " ".join(f"row {i}: value {i * 37 % 1000}" for i in range(400)) + " FINAL LINE"
    messages = judge_messages("Says the target is not met", answer, {})

    ids, cut = fit_prompt(loaded.tokenizer, messages, 1, 800)

    text = loaded.tokenizer.decode(ids)
    assert len(ids) <= 800 and cut > 0
    assert "Criterion: Says the target is not met" in text
    assert f"[... {cut} tokens cut from the start to fit the judge's context window ...]" in text
    assert "FINAL LINE" in text and "row 0: value 0 " not in text


def test_an_unknown_model_is_refused_before_serving(tmp_path, capsys):
    assert main(["--model", str(tmp_path / "missing")]) == 1
    assert "neither a model folder nor a built-in" in capsys.readouterr().err


@pytest.fixture(scope="module")
def smollm2_cache(tmp_path_factory):
    try:
        smollm2_gguf()
    except ModelUnavailable as error:
        service_missing(str(error))
    cache = tmp_path_factory.mktemp("models")
    builtin_model(SMOLLM2, cache_dir=cache)
    return cache


@pytest.mark.timeout(600)
def test_smollm2_judges_a_rubric_through_the_server(smollm2_cache, tmp_path):
    rubric = Rubric(
        criteria=[
            Criterion(id="c1", text="Says the target is not met", kind="llm_judge", required=True),
            Criterion(id="c2", text="States the adjusted APAC growth is 12.5%", kind="llm_judge"),
        ]
    )
    env = {"PRACTICUM_MODEL_CACHE": str(smollm2_cache)}
    with judge_process(SMOLLM2, tmp_path / "server.log", env=env) as (name, url):
        assert name == SMOLLM2
        first = grade_with(name, url, rubric, tmp_path)
        again = grade_with(name, url, rubric, tmp_path)

    assert [v.criterion_id for v in first.verdicts] == ["c1", "c2"]
    for verdict in first.verdicts:
        assert isinstance(verdict.met, bool)
        assert verdict.rationale.startswith("Yes" if verdict.met else "No")
        assert "P(yes)" in verdict.rationale
    assert again.verdicts == first.verdicts
