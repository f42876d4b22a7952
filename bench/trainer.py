"""Trainer benchmark: our GRPO step against TRL's `GRPOTrainer`, side by side, same everything.

Same random tiny Llama (built offline), same prompts, same reward function, group size and
completion length; β = 0 (no reference model), one optimiser step per generation (neither side
recomputes old log-probs: both use the current ones detached), lr 1e-5, no weight decay,
grad-norm clip 1, token-mean loss (TRL's `bnpo`, our `token_mean`), no zero-variance filter (TRL
has none), the same torch thread count and the same compute dtype on both sides. Each side runs in
its own subprocess so peak RSS is its own; warm-up steps are left out of the timings.

Timing on a shared machine: wall time swings several-fold when other processes hold the cores
(OpenMP threads wait for each other), so each configuration runs `--rounds` times with the two
sides alternating, and the figures are medians. With one thread per side (the default), CPU
seconds per step measure the work each side does regardless of the load; wall seconds are printed
next to them. Printed per configuration (prompts × group): CPU and wall seconds per step, steps
per second and policy-update tokens per second (from CPU time), peak RSS, our/TRL ratio (target
≥ 1.5), and the `hf` backend's generation tokens per second and CPU seconds per step. `--decoder
generate` runs our side with transformers' `generate` instead of the lean decode loop (the figure
before it; TRL's side is the same either way).

`--dtype bf16` compares both sides in bfloat16 (on CPUs with AMX / AVX512-BF16 matrix units):
TRL's model is loaded in bf16 (generation and training in bf16); ours generates with a bf16 copy
of the weights and trains fp32 master weights under bf16 autocast.

    .venv/bin/python bench/trainer.py [--steps 6] [--tokens 32] [--rounds 2] [--threads 1] [--dtype fp32]
        [--decoder lean|generate]

CPU only, offline, bounded (≈ 2–4 minutes on 2 shared cores).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
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


def run_ours(
    model: Path, prompts: int, group: int, tokens: int, steps: int, dtype: str, decoder: str = "lean"
) -> dict:
    import torch

    from rl_engine.function_tasks import FunctionTask, function_task_step
    from rl_engine.inference import SamplingParams
    from rl_engine.inference.hf import HFEngine
    from rl_engine.runtime import load_model
    from rl_engine.spec import AlgorithmSpec, BatchSpec, OptimizerSpec
    from rl_engine.trainer import Trainer

    tokenizer, policy = load_model(model, "cpu")
    _, engine_model = load_model(model, "cpu")
    bf16 = dtype == "bf16"
    if bf16:
        engine_model = engine_model.to(torch.bfloat16)
    engine = HFEngine(engine_model, tokenizer, max_batch_size=prompts * group, lean=decoder == "lean")
    algorithm = AlgorithmSpec(loss_reduction="token_mean", zero_variance_filter=False)
    trainer = Trainer(
        policy,
        algorithm=algorithm,
        optimizer=OptimizerSpec(lr=1e-5, weight_decay=0.0, grad_clip=1.0),
        batch=BatchSpec(prompts_per_step=prompts, samples_per_prompt=group, micro_batch_size=prompts * group),
        pad_token_id=tokenizer.pad_token_id,
        autocast_dtype=torch.bfloat16 if bf16 else None,
    )
    tasks = [FunctionTask(name=f"p{i}", prompt=PROMPTS[i], reward=reward) for i in range(prompts)]
    times, cpu, generate_cpu, trained, generated, generate_sec = [], [], [], [], 0, 0.0
    for step in range(WARMUP + steps):
        params = SamplingParams(temperature=1.0, max_new_tokens=tokens, seed=step)
        started, started_cpu = time.monotonic(), time.process_time()
        result = function_task_step(
            tasks,
            engine=engine,
            tokenizer=tokenizer,
            params=params,
            samples_per_prompt=group,
            algorithm=algorithm,
        )
        generated_cpu = time.process_time() - started_cpu
        metrics = trainer.update(result.samples)
        engine.sync_from(policy)
        if step >= WARMUP:
            times.append(time.monotonic() - started)
            cpu.append(time.process_time() - started_cpu)
            generate_cpu.append(generated_cpu)
            trained.append(metrics["tokens"])
            generated += result.completion_tokens
            generate_sec += result.generate_sec
    return {
        "sec_per_step": sum(times) / len(times),
        "cpu_sec_per_step": sum(cpu) / len(cpu),
        "tokens_per_step": sum(trained) / len(trained),
        "generation_tokens_per_sec": generated / generate_sec,
        "generation_cpu_sec_per_step": sum(generate_cpu) / len(generate_cpu),
        "peak_rss_mb": peak_rss_mb(),
    }


def run_trl(model: Path, prompts: int, group: int, tokens: int, steps: int, dtype: str) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    stamps: list[float] = []
    cpu_stamps: list[float] = []
    completion_tokens: list[int] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            stamps.append(time.monotonic())
            cpu_stamps.append(time.process_time())

    def reward_fn(completions, completion_ids, **kwargs):
        completion_tokens.append(sum(len(ids) for ids in completion_ids))
        return [reward(text) for text in completions]

    tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)
    bf16 = dtype == "bf16"
    policy = AutoModelForCausalLM.from_pretrained(
        model, local_files_only=True, dtype=torch.bfloat16 if bf16 else torch.float32
    )
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
            bf16=bf16,
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
    cpu = [
        later - earlier
        for earlier, later in zip(cpu_stamps[WARMUP - 1 : -1], cpu_stamps[WARMUP:], strict=True)
    ]
    return {
        "sec_per_step": sum(durations) / len(durations),
        "cpu_sec_per_step": sum(cpu) / len(cpu),
        "tokens_per_step": sum(completion_tokens[WARMUP:]) / len(durations),
        "peak_rss_mb": peak_rss_mb(),
    }


def side(name: str, model: Path, prompts: int, group: int, args: argparse.Namespace) -> dict:
    threads = str(args.threads)
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS=threads,
        MKL_NUM_THREADS=threads,
    )
    command = [sys.executable, __file__, "--side", name, "--model", str(model), "--dtype", args.dtype]
    command += ["--prompts", str(prompts), "--group", str(group), "--tokens", str(args.tokens)]
    command += ["--steps", str(args.steps), "--threads", threads, "--decoder", args.decoder]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    if result.returncode != 0:
        raise SystemExit(f"the {name} side failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def median_figures(runs: list[dict]) -> dict:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--steps", type=int, default=6, help="timed steps per side and round (after 2 warm-up steps)"
    )
    parser.add_argument("--tokens", type=int, default=32, help="completion length (max new tokens)")
    parser.add_argument("--rounds", type=int, default=2, help="runs per side and configuration, alternating")
    parser.add_argument("--threads", type=int, default=1, help="torch threads, the same on both sides")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32", help="compute dtype, both sides")
    parser.add_argument(
        "--decoder",
        choices=["lean", "generate"],
        default="lean",
        help="our hf backend's decode path (generate: transformers' generate, as TRL uses)",
    )
    parser.add_argument("--side", choices=["ours", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--prompts", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--group", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        import torch

        torch.set_num_threads(args.threads)
        figures = (args.model, args.prompts, args.group, args.tokens, args.steps, args.dtype)
        result = run_ours(*figures, args.decoder) if args.side == "ours" else run_trl(*figures)
        print(json.dumps(result))
        return
    with tempfile.TemporaryDirectory() as folder:
        model = build_model(Path(folder) / "model")
        print(
            f"random Llama, {args.tokens} completion tokens, {args.steps} timed steps per side and round, "
            f"{args.rounds} rounds (medians), {args.threads} thread(s) per side, {args.dtype} (CPU), "
            f"our hf decoder: {args.decoder}"
        )
        header = (
            f"{'config':<8} {'side':<5} {'cpu s/step':>10} {'wall s/step':>11} {'steps/s':>8} "
            f"{'upd tok/s':>10} {'RSS MB':>7}"
        )
        print(header)
        for prompts, group in CONFIGS:
            runs: dict[str, list[dict]] = {"ours": [], "trl": []}
            ratios = []
            for round_ in range(args.rounds):
                order = ("ours", "trl") if round_ % 2 == 0 else ("trl", "ours")
                for name in order:
                    runs[name].append(side(name, model, prompts, group, args))
                ratios.append(runs["trl"][-1]["cpu_sec_per_step"] / runs["ours"][-1]["cpu_sec_per_step"])
            ours, trl = median_figures(runs["ours"]), median_figures(runs["trl"])
            label = f"{prompts}x{group}"
            for name, figures in (("ours", ours), ("trl", trl)):
                cpu = figures["cpu_sec_per_step"]
                print(
                    f"{label:<8} {name:<5} {cpu:>10.3f} {figures['sec_per_step']:>11.3f} {1 / cpu:>8.2f} "
                    f"{figures['tokens_per_step'] / cpu:>10.0f} {figures['peak_rss_mb']:>7.0f}"
                )
            print(
                f"{label:<8} ratio ours/TRL (CPU time): steps/s {trl['cpu_sec_per_step'] / ours['cpu_sec_per_step']:.2f}x, "
                f"update tokens/s {(ours['tokens_per_step'] / ours['cpu_sec_per_step']) / (trl['tokens_per_step'] / trl['cpu_sec_per_step']):.2f}x "
                f"(target ≥ 1.5x; per round {', '.join(f'{r:.2f}x' for r in ratios)}); "
                f"wall {trl['sec_per_step'] / ours['sec_per_step']:.2f}x; "
                f"hf generation {ours['generation_tokens_per_sec']:.0f} tokens/s, "
                f"{ours['generation_cpu_sec_per_step']:.3f} CPU s/step (generate + score)"
            )


if __name__ == "__main__":
    main()
