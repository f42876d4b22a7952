"""The vLLM backend (GPU). vLLM is imported only when an engine is built, so importing
`rl_engine.inference` never needs it (install the `gpu` extra where it is wanted).

Token-id prompts go in as `TokensPrompt`s; `logprobs=0` asks for the sampled token's log-prob
only, and `logprobs_mode="processed_logprobs"` makes it the log-prob under the distribution that
was sampled from (after temperature and top-p), as `inference/base.py` promises. Weights are
synced from the trainer in place (`LLM.apply_model` → the model's own `load_weights`), so the
engine keeps its KV-cache memory and CUDA graphs across updates; the prefix cache is reset after.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rl_engine.inference.base import (
    ChatPrompt,
    Generation,
    InferenceFailure,
    Prompt,
    SamplingParams,
    check_prompts,
)


def vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True


class VLLMEngine:
    token_level = True

    def __init__(
        self,
        path: Path | str,
        *,
        gpu_memory_utilization: float = 0.5,
        dtype: str = "bfloat16",
        max_model_len: int | None = None,
        seed: int = 0,
    ) -> None:
        try:
            from vllm import LLM
        except ImportError as error:
            raise RuntimeError(
                "the vllm backend needs the vllm package (pip install 'practicum[gpu]') and a GPU"
            ) from error
        self.name = f"vllm:{Path(path).name}"
        self.llm = LLM(
            model=str(path),
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            seed=seed,
            enable_prefix_caching=True,
            logprobs_mode="processed_logprobs",
        )
        self.tokenizer = self.llm.get_tokenizer()

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[Generation]:
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt

        from rl_engine.agent.chat_format import render_prompt
        from rl_engine.inference.hf import _ToolSchemas

        check_prompts(prompts, token_level=True, backend="vllm")
        inputs = []
        for prompt in prompts:
            if isinstance(prompt, ChatPrompt):
                text = render_prompt(prompt.messages, _ToolSchemas.of(prompt.tools), self.tokenizer)
                prompt = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            inputs.append(TokensPrompt(prompt_token_ids=list(prompt)))
        sampling = VLLMSamplingParams(
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_new_tokens,
            seed=params.seed,
            logprobs=0,
            stop_token_ids=params.stop_token_ids or None,
        )
        try:
            outputs = self.llm.generate(inputs, sampling, use_tqdm=False)
        except Exception as error:
            raise InferenceFailure(f"vLLM generation failed: {error!r}") from error
        results = []
        for output in outputs:
            completion = output.outputs[0]
            token_ids = list(completion.token_ids)
            logprobs = [
                entry[token].logprob for entry, token in zip(completion.logprobs, token_ids, strict=True)
            ]
            results.append(
                Generation(
                    text=completion.text,
                    finish_reason="length" if completion.finish_reason == "length" else "stop",
                    token_ids=token_ids,
                    logprobs=logprobs,
                    prompt_tokens=len(output.prompt_token_ids),
                )
            )
        return results

    def load_weights(self, state_dict: Mapping[str, Any]) -> None:
        weights = list(state_dict.items())
        self.llm.apply_model(lambda model: model.load_weights(weights))
        self.llm.reset_prefix_cache()

    def sync_from(self, model: Any) -> None:
        self.load_weights({name: tensor.detach() for name, tensor in model.state_dict().items()})
