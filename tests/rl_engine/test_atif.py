import json
import subprocess

import pytest
from pydantic import ValidationError

from rl_engine.atif import AtifStep, AtifTrajectory, to_atif
from rl_engine.grading import Verdict
from rl_engine.outcomes import Outcome
from rl_engine.trace import RolloutRecord, RolloutSummary, ToolCallRecord, TurnRecord
from tests.rl_engine.sample_bundles import harbor_python


def graded_record() -> RolloutRecord:
    return RolloutRecord(
        summary=RolloutSummary(
            task_name="acme/apac-growth",
            task_hash="ab" * 32,
            sample=2,
            outcome=Outcome.GRADED,
            reward=1.0,
            score=1.0,
            passed=True,
            turns=2,
            tokens=420,
            timings={"sandbox_start": 0.1, "agent": 2.0, "grade": 0.2},
            isolation="bwrap",
            policy="scripted",
            model="qwen-0.5b",
        ),
        turns=[
            TurnRecord(index=0, role="system", content="You are an analyst."),
            TurnRecord(index=1, role="user", content="What is APAC growth?"),
            TurnRecord(
                index=2,
                role="assistant",
                content="Let me read the notes.",
                tool_calls=[
                    ToolCallRecord(
                        id="call_1", name="read_text", arguments={"path": "notes.txt"}, result_text="12.5%"
                    ),
                    ToolCallRecord(
                        id="call_2",
                        name="read_text",
                        arguments={"path": "nope"},
                        result_text="not found",
                        is_error=True,
                        repaired=True,
                    ),
                ],
                prompt_tokens=300,
                completion_tokens=40,
                duration_ms=210.0,
                notes=["repaired a trailing comma"],
            ),
            TurnRecord(
                index=3, role="assistant", content="Growth is 12.5%.", prompt_tokens=70, completion_tokens=10
            ),
        ],
        verdicts=[
            Verdict(
                criterion_id="c1",
                kind="number_close",
                met=True,
                rationale="found 12.5",
                weight=1.0,
                required=True,
            )
        ],
        final_answer="Growth is 12.5%.",
    )


def harness_error_record() -> RolloutRecord:
    return RolloutRecord(
        summary=RolloutSummary(
            task_name="acme/apac-growth",
            task_hash="ab" * 32,
            outcome=Outcome.HARNESS_ERROR,
            code="SANDBOX_START",
            message="bwrap failed",
        ),
        error_detail="bwrap: setting up uid map: Permission denied",
    )


def test_a_graded_rollout_exports_steps_tool_calls_observations_and_metrics():
    trajectory = to_atif(graded_record())

    assert trajectory["schema_version"] == "ATIF-v1.7"
    assert trajectory["agent"] == {
        "name": "practicum",
        "version": "0.1.0",
        "model_name": "qwen-0.5b",
        "extra": {"policy": "scripted"},
    }
    assert [step["source"] for step in trajectory["steps"]] == ["system", "user", "agent", "agent"]
    assert [step["step_id"] for step in trajectory["steps"]] == [1, 2, 3, 4]
    acting = trajectory["steps"][2]
    assert acting["tool_calls"][0] == {
        "tool_call_id": "call_1",
        "function_name": "read_text",
        "arguments": {"path": "notes.txt"},
    }
    assert acting["tool_calls"][1]["extra"] == {"repaired": True}
    assert acting["observation"]["results"][1] == {
        "source_call_id": "call_2",
        "content": "not found",
        "extra": {"is_error": True, "duration_ms": 0.0},
    }
    assert acting["metrics"] == {"prompt_tokens": 300, "completion_tokens": 40}
    assert acting["extra"] == {"duration_ms": 210.0, "notes": ["repaired a trailing comma"]}
    assert trajectory["final_metrics"]["total_prompt_tokens"] == 370
    assert trajectory["final_metrics"]["total_steps"] == 4
    assert trajectory["extra"]["outcome"] == "graded" and trajectory["extra"]["reward"] == 1.0
    assert trajectory["extra"]["verdicts"][0]["rationale"] == "found 12.5"
    assert AtifTrajectory.model_validate(trajectory)


def test_a_rollout_that_failed_before_its_first_turn_still_exports_one_step():
    trajectory = to_atif(harness_error_record())

    [step] = trajectory["steps"]
    assert step["source"] == "system"
    assert "harness_error SANDBOX_START: bwrap failed" in step["message"]
    assert trajectory["extra"]["code"] == "SANDBOX_START"
    assert trajectory["extra"]["error_detail"].startswith("bwrap:")
    assert "reward" not in trajectory["extra"] or trajectory["extra"]["reward"] is None


def test_the_models_enforce_the_atif_rules():
    with pytest.raises(ValidationError, match="only on agent steps"):
        AtifStep(step_id=1, source="user", message="hi", metrics={"prompt_tokens": 1})
    with pytest.raises(ValidationError, match="not a tool call of step 1"):
        AtifStep(
            step_id=1, source="agent", message="", observation={"results": [{"source_call_id": "ghost"}]}
        )
    with pytest.raises(ValidationError, match="expected 1"):
        AtifTrajectory(
            agent={"name": "a", "version": "1"}, steps=[{"step_id": 2, "source": "user", "message": "x"}]
        )
    with pytest.raises(ValidationError, match="Extra inputs"):
        AtifTrajectory(
            agent={"name": "a", "version": "1", "colour": "red"},
            steps=[{"step_id": 1, "source": "user", "message": "x"}],
        )


def test_harbors_own_trajectory_model_accepts_the_exports(tmp_path):
    python = harbor_python()
    paths = []
    for name, record in (("graded", graded_record()), ("harness_error", harness_error_record())):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(to_atif(record)))
        paths.append(str(path))
    check = (
        "import json, sys\n"
        "from harbor.models.trajectories.trajectory import Trajectory\n"
        "for path in sys.argv[1:]:\n"
        "    Trajectory.model_validate(json.load(open(path)))\n"
        "print('valid', len(sys.argv) - 1)\n"
    )

    process = subprocess.run([str(python), "-c", check, *paths], capture_output=True, text=True, timeout=120)

    assert process.returncode == 0, process.stderr
    assert process.stdout.strip() == "valid 2"
