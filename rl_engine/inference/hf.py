"""The transformers backend: batched generation with a KV cache and left padding, CPU or CUDA.

Prompts of one call are generated together in batches of `max_batch_size`, left-padded so every
row's last prompt token sits at the same position. Llama-family models go through the lean loop of
`lean_decode.py` (same arithmetic, a fraction of `generate`'s per-step overhead, a repeated prompt
prefilled once); other models, or `lean=False`, through transformers' `generate`. Either way the
log-prob of each generated token is that of the distribution it was sampled from (temperature,
top-p); see `inference/base.py`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rl_engine.agent.chat_format import END_OF_TURN, render_prompt
from rl_engine.inference.base import (
    ChatPrompt,
    Generation,
    InferenceFailure,
    Prompt,
    SamplingParams,
    check_prompts,
)


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class HFEngine:
    token_level = True

    def __init__(
        self, model: Any, tokenizer: Any, *, name: str = "hf", max_batch_size: int = 64, lean: bool = True
    ) -> None:
        from rl_engine.inference.lean_decode import LeanDecoder, supports

        self.model = model.eval()
        # The lean loop where it reproduces the model exactly, transformers' `generate` elsewhere.
        self._lean = LeanDecoder(model) if lean and supports(model) else None
        self.decoder = "lean" if self._lean is not None else "generate"
        self.tokenizer = tokenizer
        self.name = name
        self.max_batch_size = max_batch_size
        self.device = next(model.parameters()).device
        self._lock = threading.Lock()

    @classmethod
    def from_pretrained(
        cls, path: Path | str, *, device: str | None = None, max_batch_size: int = 64
    ) -> HFEngine:
        """Load from a local folder (never downloads); bf16 on CUDA, fp32 on CPU."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        device = device or default_device()
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype).to(device)
        return cls(model, tokenizer, name=f"hf:{Path(path).name}", max_batch_size=max_batch_size)

    def stop_token_ids(self, params: SamplingParams) -> list[int]:
        stops = list(params.stop_token_ids)
        candidates = [self.tokenizer.eos_token_id, self.tokenizer.convert_tokens_to_ids(END_OF_TURN)]
        for token in candidates:
            if isinstance(token, int) and token != self.tokenizer.unk_token_id and token not in stops:
                stops.append(token)
        return stops

    def prompt_ids(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, ChatPrompt):
            text = render_prompt(prompt.messages, _ToolSchemas.of(prompt.tools), self.tokenizer)
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return list(prompt)

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[Generation]:
        check_prompts(prompts, token_level=True, backend="hf")
        ids = [self.prompt_ids(prompt) for prompt in prompts]
        results: list[Generation] = []
        try:
            with self._lock:
                for start in range(0, len(ids), self.max_batch_size):
                    results.extend(self._generate_batch(ids[start : start + self.max_batch_size], params))
        except Exception as error:
            raise InferenceFailure(f"transformers generation failed: {error!r}") from error
        return results

    def _generate_batch(self, batch: list[list[int]], params: SamplingParams) -> list[Generation]:
        import torch

        pad_id = self.tokenizer.pad_token_id
        if pad_id is None:
            pad_id = self.tokenizer.eos_token_id or 0
        if self._lean is not None:
            return self._lean_batch(batch, params, pad_id)
        width = max(len(ids) for ids in batch)
        input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, ids in enumerate(batch):
            input_ids[row, width - len(ids) :] = torch.tensor(ids)
            attention_mask[row, width - len(ids) :] = 1
        stops = self.stop_token_ids(params)
        sampled = params.temperature > 0
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.inference_mode():
            if params.seed is not None:
                torch.manual_seed(params.seed)
            output = self.model.generate(
                input_ids.to(self.device),
                attention_mask=attention_mask.to(self.device),
                max_new_tokens=params.max_new_tokens,
                do_sample=sampled,
                temperature=params.temperature if sampled else None,
                top_p=params.top_p if sampled and params.top_p < 1 else None,
                top_k=0 if sampled else None,
                eos_token_id=stops or None,
                pad_token_id=pad_id,
                output_scores=True,
                return_dict_in_generate=True,
            )
        new_tokens = output.sequences[:, width:].cpu()
        scores = torch.stack(output.scores, dim=1).float().log_softmax(dim=-1).cpu()
        token_logprobs = scores.gather(-1, new_tokens[:, :, None]).squeeze(-1)
        return [
            self._one(new_tokens[row].tolist(), token_logprobs[row].tolist(), stops, len(batch[row]))
            for row in range(len(batch))
        ]

    def _lean_batch(self, batch: list[list[int]], params: SamplingParams, pad_id: int) -> list[Generation]:
        import torch

        stops = self.stop_token_ids(params)
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            if params.seed is not None:
                torch.manual_seed(params.seed)
            sampled = self._lean.sample(
                batch,
                max_new_tokens=params.max_new_tokens,
                temperature=params.temperature,
                top_p=params.top_p,
                stop_ids=stops,
                pad_id=pad_id,
            )
        return [
            self._one(tokens, logprobs, stops, len(prompt))
            for tokens, logprobs, prompt in zip(sampled.tokens, sampled.logprobs, batch, strict=True)
        ]

    def _one(self, tokens: list[int], logprobs: list[float], stops: list[int], prompt_len: int) -> Generation:
        end = next((index for index, token in enumerate(tokens) if token in stops), None)
        if end is not None:
            tokens, logprobs = tokens[: end + 1], logprobs[: end + 1]
        return Generation(
            text=self.tokenizer.decode(tokens, skip_special_tokens=True),
            finish_reason="stop" if end is not None else "length",
            token_ids=tokens,
            logprobs=logprobs,
            prompt_tokens=prompt_len,
        )

    def load_weights(self, state_dict: Mapping[str, Any]) -> None:
        with self._lock:
            self.model.load_state_dict(dict(state_dict), strict=True)

    def sync_from(self, model: Any) -> None:
        if model is self.model:
            return
        self.load_weights(model.state_dict())


class _ToolSchemas:
    """OpenAI function schemas seen as the `ToolSpec`-like objects `render_prompt` takes."""

    def __init__(self, schema: dict[str, Any]) -> None:
        function = schema.get("function", schema)
        self.name = function["name"]
        self.description = function.get("description", "")
        self.input_schema = function.get("parameters", {})

    @classmethod
    def of(cls, schemas: list[dict[str, Any]]) -> list[_ToolSchemas]:
        return [cls(schema) for schema in schemas]
