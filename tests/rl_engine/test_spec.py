"""The run spec: valid specs round-trip through JSON, invalid ones are refused with every problem."""

import json
from typing import get_args

import pytest

from rl_engine import algorithms
from rl_engine.mcp_server import server
from rl_engine.sandbox.config import SandboxConfig
from rl_engine.spec import (
    FAULT_KINDS,
    AdvantageEstimatorName,
    KlEstimatorName,
    LossReductionName,
    PolicyLossName,
    RunSpec,
    SpecError,
    parse_run_spec,
    run_spec_json_schema,
)

TRAIN = {
    "kind": "train",
    "model": {"builtin": "tiny-llama"},
    "tasks": {"train_dir": "tasks/train"},
    "max_steps": 5,
}


def refused(data) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        parse_run_spec(data)
    return {problem.loc: problem.message for problem in caught.value.problems}


def spec_with(**sections) -> dict:
    return {**TRAIN, **sections}


class TestValidSpecs:
    def test_a_minimal_train_spec_takes_the_documented_defaults(self):
        spec = parse_run_spec(TRAIN)
        assert spec.algorithm.advantage_estimator == "grpo" and spec.algorithm.loss_reduction == "prompt_mean"
        assert spec.algorithm.harness_error_masking == "group" and spec.algorithm.zero_variance_filter
        assert spec.inference.backend == "hf" and not spec.sft_warm_start.enabled

    def test_it_round_trips_through_json(self):
        spec = parse_run_spec(
            spec_with(
                algorithm={"policy_loss": "dppo", "advantage_estimator": "rloo", "norm_adv_by_std": False},
                evaluation={"every_steps": 2, "samples_per_task": 4, "pass_at_k": [1, 4]},
                tasks={"train_dir": "t", "eval_dir": "e"},
            )
        )
        assert parse_run_spec(spec.model_dump_json()) == spec
        assert parse_run_spec(json.loads(spec.model_dump_json())) == spec

    def test_an_eval_against_an_openai_endpoint_needs_no_local_model(self):
        spec = parse_run_spec(
            {
                "kind": "eval",
                "tasks": {"eval_dir": "e"},
                "inference": {
                    "backend": "openai",
                    "base_url": "http://127.0.0.1:8000/v1",
                    "served_model_name": "m",
                },
            }
        )
        assert spec.model is None

    def test_oracle_and_null_baselines_need_no_model(self):
        assert (
            parse_run_spec({"kind": "eval", "agent": "oracle", "tasks": {"eval_dir": "e"}}).agent == "oracle"
        )
        assert parse_run_spec({"kind": "validate", "tasks": {"train_dir": "t"}}).kind == "validate"

    def test_vllm_with_a_gpu_is_accepted(self):
        spec = parse_run_spec(spec_with(inference={"backend": "vllm"}, resources={"gpus_per_engine": 1}))
        assert spec.inference.backend == "vllm"

    def test_a_train_run_may_take_function_tasks_instead_of_bundles(self):
        for name in ("toy-colours", "my_project.rewards:TASKS"):
            spec = parse_run_spec({**TRAIN, "tasks": {"function_tasks": name}})
            assert spec.tasks.function_tasks == name and spec.tasks.train_dir is None

    def test_the_sandbox_section_is_the_harness_sandbox_config(self):
        spec = parse_run_spec(spec_with(sandbox={"isolation": "bwrap", "memory_mb": 512}))
        assert isinstance(spec.sandbox, SandboxConfig) and spec.sandbox.memory_mb == 512


class TestInvalidSpecs:
    def test_every_problem_is_listed_at_once_with_its_location(self):
        problems = refused(
            {
                "kind": "train",
                "model": {"path": "/m", "builtin": "tiny-llama"},
                "tasks": {},
                "batch": {"prompts_per_step": 3, "mini_batches": 2, "samples_per_prompt": 1},
                "inference": {"backend": "vllm"},
                "algorithm": {"policy_loss": "grpo", "kl_coef": -1},
                "evaluation": {"pass_at_k": [1, 4]},
                "sandbox": {"backnd": "docker"},
                "lr": 0.1,
            }
        )
        assert problems == {
            "model": "give exactly one of path (a local model folder) or builtin (a built-in model)",
            "algorithm.policy_loss": "Input should be 'ppo_clip', 'dppo' or 'rollout_is'",
            "algorithm.kl_coef": "Input should be greater than or equal to 0",
            "evaluation": "Pass@4 needs at least 4 samples per task, samples_per_task is 1",
            "sandbox.backnd": "Extra inputs are not permitted",
            "lr": "Extra inputs are not permitted",
            "batch.mini_batches": "mini_batches (2) must divide prompts_per_step (3) so that no prompt's group "
            "is split across updates",
            "resources.gpus_per_engine": "the vllm backend needs at least 1 GPU per engine",
            "batch.samples_per_prompt": "group advantages need at least 2 samples per prompt",
            "tasks.train_dir": "a train run needs tasks.train_dir or tasks.function_tasks",
        }

    def test_the_error_message_lists_every_problem(self):
        with pytest.raises(SpecError) as caught:
            parse_run_spec({"kind": "train", "max_steps": 0, "seed": -1})
        text = str(caught.value)
        assert text.startswith("invalid run spec (4 problems):")
        for loc in ("max_steps", "seed", "model", "tasks.train_dir"):
            assert f"- {loc}:" in text

    def test_a_missing_kind_is_named(self):
        assert refused({})["kind"] == "Field required"

    def test_openai_cannot_train(self):
        problems = refused(
            spec_with(inference={"backend": "openai", "base_url": "http://x/v1", "served_model_name": "m"})
        )
        assert "evaluation only" in problems["inference.backend"]

    def test_openai_needs_an_endpoint_and_others_refuse_one(self):
        assert (
            "base_url and served_model_name"
            in refused(spec_with(inference={"backend": "openai"}))["inference"]
        )
        assert "openai backend" in refused(spec_with(inference={"base_url": "http://x/v1"}))["inference"]

    def test_tensor_parallelism_beyond_the_engines_gpus_is_refused(self):
        problems = refused(
            spec_with(
                inference={"backend": "vllm", "tensor_parallel_size": 2}, resources={"gpus_per_engine": 1}
            )
        )
        assert "exceeds gpus_per_engine" in problems["inference.tensor_parallel_size"]

    def test_rloo_with_std_normalisation_is_refused(self):
        assert (
            "never std-normalised"
            in refused(spec_with(algorithm={"advantage_estimator": "rloo"}))["algorithm"]
        )

    def test_periodic_evaluation_needs_an_eval_split(self):
        assert "tasks.eval_dir" in refused(spec_with(evaluation={"every_steps": 5}))

    def test_a_warm_start_outside_training_is_refused(self):
        problems = refused(
            {
                "kind": "eval",
                "model": {"path": "/m"},
                "tasks": {"eval_dir": "e"},
                "sft_warm_start": {"enabled": True},
            }
        )
        assert problems == {
            "sft_warm_start.enabled": "a warm start belongs to a train run, not to kind 'eval'"
        }

    def test_a_warm_start_needs_task_bundles_for_its_oracle(self):
        problems = refused(spec_with(tasks={"function_tasks": "toy-green"}, sft_warm_start={"enabled": True}))
        assert "function tasks have no oracle" in problems["sft_warm_start.enabled"]

    def test_function_tasks_are_a_builtin_set_or_an_import_path(self):
        problems = refused(spec_with(tasks={"function_tasks": "my tasks.py"}))
        assert problems == {
            "tasks.function_tasks": "'my tasks.py' is neither a built-in function-task set (toy-green, "
            "toy-colours) nor an import path like 'package.module:name'"
        }

    def test_function_tasks_replace_the_train_folder_and_are_for_training_only(self):
        both = refused(spec_with(tasks={"train_dir": "t", "function_tasks": "toy-green"}))
        assert both == {
            "tasks.function_tasks": "give tasks.train_dir (task bundles) or tasks.function_tasks, not both"
        }
        evaluation = refused(
            {
                "kind": "eval",
                "model": {"path": "/m"},
                "tasks": {"eval_dir": "e", "function_tasks": "toy-green"},
            }
        )
        assert evaluation == {
            "tasks.function_tasks": "function tasks are trained on, not used by kind 'eval'"
        }
        on_ray = refused(
            {**TRAIN, "tasks": {"function_tasks": "toy-green"}, "resources": {"rollout_workers": 2}}
        )
        assert "rollout_workers to 0" in on_ray["resources.rollout_workers"]

    def test_a_train_run_trains_the_model_not_a_baseline(self):
        assert "not the oracle agent" in refused(spec_with(agent="oracle"))["agent"]

    def test_an_unknown_builtin_model_and_a_nan_reward_are_refused(self):
        problems = refused(spec_with(model={"builtin": "gpt-5"}, agent_error_reward=float("nan")))
        assert set(problems) == {"model.builtin", "agent_error_reward"}

    def test_duplicate_k_is_refused(self):
        problems = refused(spec_with(evaluation={"samples_per_task": 4, "pass_at_k": [2, 2]}))
        assert problems["evaluation"] == "pass_at_k lists a k twice: [2, 2]"

    def test_json_that_is_not_an_object_is_refused(self):
        assert refused("{not json")[""].startswith("not valid JSON")
        assert refused("[1, 2]") == {"": "a run spec is a JSON object, got list"}

    def test_building_an_inconsistent_spec_in_code_is_refused_too(self):
        with pytest.raises(SpecError, match="mini_batches"):
            RunSpec(
                kind="train",
                model={"builtin": "tiny-llama"},
                tasks={"train_dir": "t"},
                batch={"prompts_per_step": 3, "mini_batches": 2},
            )


class TestSchemaAndRegistries:
    def test_the_algorithm_names_are_the_registries_names(self):
        assert get_args(AdvantageEstimatorName) == tuple(algorithms.ADVANTAGE_ESTIMATORS)
        assert get_args(PolicyLossName) == tuple(algorithms.POLICY_LOSSES)
        assert get_args(LossReductionName) == tuple(algorithms.LOSS_REDUCTIONS)
        assert get_args(KlEstimatorName) == tuple(algorithms.KL_ESTIMATORS)

    def test_the_json_schema_offers_the_choices_a_form_needs(self):
        schema = run_spec_json_schema()
        json.dumps(schema)
        algorithm = schema["$defs"]["AlgorithmSpec"]["properties"]
        assert algorithm["policy_loss"]["enum"] == ["ppo_clip", "dppo", "rollout_is"]
        assert algorithm["loss_reduction"]["default"] == "prompt_mean"
        assert schema["required"] == ["kind"]
        assert schema["$defs"]["BatchSpec"]["properties"]["mini_batches"]["minimum"] == 1


class TestHealthGate:
    def test_the_documented_defaults(self):
        gate = parse_run_spec(TRAIN).health_gate
        assert gate.max_eval_harness_error_rate == 0.1 and gate.window_rollouts == 64
        assert gate.max_window_harness_error_rate == 0.3 and gate.on_trip == "fail"

    def test_null_thresholds_turn_the_checks_off_and_pause_round_trips(self):
        spec = parse_run_spec(
            spec_with(
                health_gate={
                    "max_eval_harness_error_rate": None,
                    "max_window_harness_error_rate": None,
                    "window_rollouts": 8,
                    "on_trip": "pause",
                }
            )
        )
        assert spec.health_gate.max_eval_harness_error_rate is None
        assert spec.health_gate.max_window_harness_error_rate is None
        assert parse_run_spec(spec.model_dump_json()) == spec

    def test_out_of_range_values_are_each_named(self):
        problems = refused(
            spec_with(
                health_gate={
                    "max_eval_harness_error_rate": 1.5,
                    "window_rollouts": 0,
                    "max_window_harness_error_rate": -0.1,
                    "on_trip": "retry",
                    "window": 3,
                }
            )
        )
        assert problems == {
            "health_gate.max_eval_harness_error_rate": "Input should be less than or equal to 1",
            "health_gate.window_rollouts": "Input should be greater than or equal to 1",
            "health_gate.max_window_harness_error_rate": "Input should be greater than or equal to 0",
            "health_gate.on_trip": "Input should be 'fail' or 'pause'",
            "health_gate.window": "Extra inputs are not permitted",
        }

    def test_the_json_schema_describes_the_gate(self):
        gate = run_spec_json_schema()["$defs"]["HealthGateSpec"]["properties"]
        assert gate["on_trip"]["enum"] == ["fail", "pause"] and gate["window_rollouts"]["minimum"] == 1
        assert all(field.get("description") for field in gate.values())


class TestFaults:
    EVAL = {"kind": "eval", "agent": "oracle", "tasks": {"eval_dir": "tasks"}}

    def test_no_faults_by_default_and_a_drill_round_trips(self):
        assert parse_run_spec(self.EVAL).faults == []
        spec = parse_run_spec({**self.EVAL, "faults": ["hide:read_pdf", "exit:submit_answer"]})
        assert spec.faults == ["hide:read_pdf", "exit:submit_answer"]
        assert parse_run_spec(spec.model_dump_json()) == spec
        assert server.parse_faults(",".join(spec.faults)) == {"read_pdf": "hide", "submit_answer": "exit"}

    def test_each_bad_entry_is_named_with_the_kinds_or_tools_allowed(self):
        problems = refused(
            {**self.EVAL, "faults": ["crash:read_pdf", "raise:read_pfd", "read_pdf", "hang:list_files"]}
        )
        message = problems["faults"]
        assert "'crash:read_pdf': the kind 'crash' is not one of raise, hang, exit, hide" in message
        assert "'raise:read_pfd': there is no tool 'read_pfd'; the tools are list_files," in message
        assert "'read_pdf' is not KIND:TOOL (e.g. hide:read_pdf)" in message
        assert "hang:list_files" not in message

    def test_one_fault_per_tool(self):
        problems = refused({**self.EVAL, "faults": ["raise:read_pdf", "exit:read_pdf"]})
        assert problems == {"faults": "read_pdf is given more than one fault; give one"}

    def test_the_kinds_are_the_tool_servers(self):
        assert FAULT_KINDS == server.FAULT_KINDS
