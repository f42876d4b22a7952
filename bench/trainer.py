"""Trainer benchmark: our GRPO step against TRL's `GRPOTrainer`, side by side, same everything.

Same random tiny Llama (built offline), same prompts, same reward function, group size and
completion length; β = 0 (no reference model), one optimiser step per generation, lr 1e-5, no
weight decay, grad-norm clip 1, token-mean loss (TRL's `bnpo`, our `token_mean`), no zero-variance
filter (TRL has none). Each side runs in its own subprocess so peak RSS is its own; warm-up steps
are left out of the timings. Printed per configuration (prompts × group): seconds per step, steps
per second, policy-update tokens per second (completion tokens trained / step wall time), peak RSS,
our/TRL throughput ratio (target ≥ 1.5), and the `hf` backend's generation tokens per second.

    .venv/bin/python bench/trainer.py [--steps 8] [--tokens 32]

CPU only, offline, bounded (≈ 2–4 minutes on 2 shared cores).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROMPTS = [
    "The quarterly report says",
    "Adjusted APAC growth was",
    "Please list the files in",
    "The answer is",
    "Revenue for the group rose to",
    "Our target for next year is",
    "Read the memo and",
    "The spreadsheet shows",
]
CONFIGS = [(1, 8), (8, 8)]  # prompts per step × samples per prompt
WARMUP = 2


def reward(text: str) -> float:
    """Share of vowels in the completion: cheap, dense, and the same function for both sides."""
    return sum(ch in "aeiou" for ch in text) / max(1, len(text))


def build_model(folder: Path) -> Path:
    from rl_engine.models import TinyLlamaConfig, build_tiny_model

    # ≈ 3.2M parameters, the size the TRL figures were measured with.
    config = TinyLlamaConfig(
        hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4
    )
    return build_tiny_model(folder, seed=0, config=config)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_ours(model: Path, prompts: int, group: int, tokens: int, steps: int) -> dict:
    from rl_engine.function_tasks import FunctionTask, function_task_step
    from rl_engine.inference import SamplingParams
    from rl_engine.inference.hf import HFEngine
    from rl_engine.runtime import load_model
    from rl_engine.spec import AlgorithmSpec, BatchSpec, OptimizerSpec
    from rl_engine.trainer import Trainer

    tokenizer, policy = load_model(model, "cpu")
    _, engine_model = load_model(model, "cpu")
    engine = HFEngine(engine_model, tokenizer, max_batch_size=prompts * group)
    algorithm = AlgorithmSpec(loss_reduction="token_mean", zero_variance_filter=False)
    trainer = Trainer(
        policy,
        algorithm=algorithm,
        optimizer=OptimizerSpec(lr=1e-5, weight_decay=0.0, grad_clip=1.0),
        batch=BatchSpec(prompts_per_step=prompts, samples_per_prompt=group, micro_batch_size=prompts * group),
        pad_token_id=tokenizer.pad_token_id,
    )
    tasks = [FunctionTask(name=f"p{i}", prompt=PROMPTS[i], reward=reward) for i in range(prompts)]
    times, trained, generated, generate_sec = [], [], 0, 0.0
    for step in range(WARMUP + steps):
        params = SamplingParams(temperature=1.0, max_new_tokens=tokens, seed=step)
        started = time.monotonic()
        result = function_task_step(
            tasks,
            engine=engine,
            tokenizer=tokenizer,
            params=params,
            samples_per_prompt=group,
            algorithm=algorithm,
        )
        metrics = trainer.update(result.samples)
        engine.sync_from(policy)
        if step >= WARMUP:
            times.append(time.monotonic() - started)
            trained.append(metrics["tokens"])
            generated += result.completion_tokens
            generate_sec += result.generate_sec
    return {
        "sec_per_step": sum(times) / len(times),
        "tokens_per_sec": sum(trained) / sum(times),
        "generation_tokens_per_sec": generated / generate_sec,
        "peak_rss_mb": peak_rss_mb(),
    }


def run_trl(model: Path, prompts: int, group: int, tokens: int, steps: int) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    stamps: list[float] = []
    completion_tokens: list[int] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            stamps.append(time.monotonic())

    def reward_fn(completions, completion_ids, **kwargs):
        completion_tokens.append(sum(len(ids) for ids in completion_ids))
        return [reward(text) for text in completions]

    tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)
    policy = AutoModelForCausalLM.from_pretrained(model, local_files_only=True, dtype=torch.float32)
    total = WARMUP + steps
    dataset = Dataset.from_list([{"prompt": PROMPTS[i]} for _ in range(total) for i in range(prompts)])
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=prompts * group,
            num_generations=group,
            max_completion_length=tokens,
            max_steps=total,
            learning_rate=1e-5,
            weight_decay=0.0,
            max_grad_norm=1.0,
            beta=0.0,
            loss_type="bnpo",
            temperature=1.0,
            use_cpu=True,
            bf16=False,
            report_to=[],
            logging_steps=total,
            save_strategy="no",
            shuffle_dataset=False,
            seed=0,
            disable_tqdm=True,
        )
        trainer = GRPOTrainer(
            model=policy,
            reward_funcs=[reward_fn],
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[Clock()],
        )
        trainer.train()
    durations = [
        later - earlier for earlier, later in zip(stamps[WARMUP - 1 : -1], stamps[WARMUP:], strict=True)
    ]
    return {
        "sec_per_step": sum(durations) / len(durations),
        "tokens_per_sec": sum(completion_tokens[WARMUP:]) / sum(durations),
        "peak_rss_mb": peak_rss_mb(),
    }


def side(name: str, model: Path, prompts: int, group: int, tokens: int, steps: int) -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    command = [sys.executable, __file__, "--side", name, "--model", str(model)]
    command += [
        "--prompts",
        str(prompts),
        "--group",
        str(group),
        "--tokens",
        str(tokens),
        "--steps",
        str(steps),
    ]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240)
    if result.returncode != 0:
        raise SystemExit(f"the {name} side failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8, help="timed steps per side (after 2 warm-up steps)")
    parser.add_argument("--tokens", type=int, default=32, help="completion length (max new tokens)")
    parser.add_argument("--side", choices=["ours", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--prompts", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--group", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        run = run_ours if args.side == "ours" else run_trl
        print(json.dumps(run(args.model, args.prompts, args.group, args.tokens, args.steps)))
        return
    with tempfile.TemporaryDirectory() as folder:
        model = build_model(Path(folder) / "model")
        print(f"random Llama, {args.tokens} completion tokens, {args.steps} timed steps per side (CPU)")
        header = f"{'config':<8} {'side':<5} {'s/step':>7} {'steps/s':>8} {'upd tok/s':>10} {'RSS MB':>7}"
        print(header)
        for prompts, group in CONFIGS:
            ours = side("ours", model, prompts, group, args.tokens, args.steps)
            trl = side("trl", model, prompts, group, args.tokens, args.steps)
            label = f"{prompts}x{group}"
            for name, figures in (("ours", ours), ("trl", trl)):
                print(
                    f"{label:<8} {name:<5} {figures['sec_per_step']:>7.3f} {1 / figures['sec_per_step']:>8.2f} "
                    f"{figures['tokens_per_sec']:>10.0f} {figures['peak_rss_mb']:>7.0f}"
                )
            print(
                f"{label:<8} ratio ours/TRL: steps/s {trl['sec_per_step'] / ours['sec_per_step']:.2f}x, "
                f"update tokens/s {ours['tokens_per_sec'] / trl['tokens_per_sec']:.2f}x (target ≥ 1.5x); "
                f"hf generation {ours['generation_tokens_per_sec']:.0f} tokens/s"
            )


if __name__ == "__main__":
    main()
