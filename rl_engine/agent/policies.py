"""Policies: validation ones (oracle, null, scripted) and model-backed ones (OpenAI-compatible HTTP, transformers).

Every policy answers with an `AssistantTurn`; a generation that fails for the platform's reasons
(server down, HTTP error, an exception inside `generate`) is HarnessError(INFERENCE), so it is
retried and never trained on. A prompt that no longer fits the model is the model's problem:
AgentError(CONTEXT_OVERFLOW).
"""

from __future__ import annotations

import asyncio
import json
import threading
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from rl_engine.agent.chat_format import END_OF_TURN, openai_tool_schemas, render_prompt
from rl_engine.agent.loop import SUBMIT_TOOL
from rl_engine.agent.policy import AssistantTurn, PolicyContext
from rl_engine.outcomes import AgentError, AgentErrorCode, HarnessCode, HarnessError

if TYPE_CHECKING:
    from rl_engine.sandbox import ToolSpec

NULL_ANSWER = "I don't know."


def answer_turn(answer: str, tools: list[ToolSpec], call_id: str = "final") -> AssistantTurn:
    """Submit through the real submit_answer tool when the task enables it, else answer in plain text."""
    if SUBMIT_TOOL in {tool.name for tool in tools}:
        call = {"name": SUBMIT_TOOL, "arguments": {"answer": answer}}
        return AssistantTurn(text="", tool_calls=[_openai_call(call_id, call)])
    return AssistantTurn(text=answer)


def _openai_call(call_id: str, call: dict[str, Any]) -> dict[str, Any]:
    arguments = json.dumps(call.get("arguments", {}), ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": call["name"], "arguments": arguments}}


class OraclePolicy:
    """Runs the bundle's solution/solve.py in the sandbox and submits what it prints, else the golden answer.

    A solution script that exits non-zero, or a bundle with neither script nor golden answer, is a
    defect of the bundle: HarnessError(BUNDLE_INVALID) with the script's stderr as evidence.
    """

    name = "oracle"

    async def next_turn(
        self, messages: list[dict], tools: list[ToolSpec], *, context: PolicyContext
    ) -> AssistantTurn:
        bundle = context.bundle
        if bundle.solve_py:
            stdout, stderr, returncode = await context.sandbox.run_solution(bundle.solve_py)
            if returncode != 0:
                raise HarnessError(
                    HarnessCode.BUNDLE_INVALID,
                    f"solution/solve.py exited with code {returncode}",
                    detail=stderr,
                )
            answer = stdout.strip()
        elif bundle.golden_answer is not None:
            answer = bundle.golden_answer
        else:
            raise HarnessError(
                HarnessCode.BUNDLE_INVALID, "the bundle has neither solution/solve.py nor solution/answer.md"
            )
        if context.turn > 0:
            # submit_answer refused the first submission: end with the answer as plain text.
            return AssistantTurn(text=answer)
        return answer_turn(answer, tools)


class NullPolicy:
    """Submits "I don't know." right away; a healthy task must not pass it."""

    name = "null"

    async def next_turn(
        self, messages: list[dict], tools: list[ToolSpec], *, context: PolicyContext
    ) -> AssistantTurn:
        return AssistantTurn(text=NULL_ANSWER) if context.turn > 0 else answer_turn(NULL_ANSWER, tools)


class ScriptedPolicy:
    """Replays a fixed list of turns (tests, benchmarks). Once the list is used up, the last turn repeats.

    Each turn is an object with any of:
    - `tool_calls`: `[{"name": ..., "arguments": {...}}]`, sent as OpenAI-style calls;
    - `text`: raw assistant text, parsed like model output (so it may hold `<tool_call>` blocks);
    - `answer`: the final answer, submitted as `answer_turn` does;
    - `completion_tokens`, `prompt_tokens`: token counts to report (default 0);
    - `delay_sec`: seconds to wait before answering (to exercise deadlines).
    The file is a JSON list of such turns, or an object with a `turns` list.
    """

    def __init__(self, turns: list[dict[str, Any]], name: str = "scripted") -> None:
        if not turns:
            raise ValueError("a scripted policy needs at least one turn")
        self.turns = turns
        self.name = name

    @classmethod
    def from_file(cls, path: Path) -> ScriptedPolicy:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as error:
            raise ValueError(f"cannot read the script {path}: {error}") from error
        turns = data.get("turns") if isinstance(data, dict) else data
        if not isinstance(turns, list) or not all(isinstance(turn, dict) for turn in turns):
            raise ValueError(f"{path}: expected a JSON list of turn objects (or {{'turns': [...]}})")
        return cls(turns, name=f"scripted:{Path(path).name}")

    async def next_turn(
        self, messages: list[dict], tools: list[ToolSpec], *, context: PolicyContext
    ) -> AssistantTurn:
        step = self.turns[min(context.turn, len(self.turns) - 1)]
        if step.get("delay_sec"):
            await asyncio.sleep(step["delay_sec"])
        if "answer" in step:
            turn = answer_turn(step["answer"], tools, call_id=f"call_{context.turn}_answer")
        else:
            calls = [
                _openai_call(f"call_{context.turn}_{i}", call)
                for i, call in enumerate(step.get("tool_calls", []))
            ]
            turn = AssistantTurn(text=step.get("text", ""), tool_calls=calls or None)
        turn.prompt_tokens = step.get("prompt_tokens", 0)
        turn.completion_tokens = step.get("completion_tokens", 0)
        return turn


class OpenAIPolicy:
    """Any OpenAI-compatible `/chat/completions` endpoint with tools (vLLM, SGLang, llama.cpp, hosted APIs)."""

    def __init__(
        self,
        base_url: str,
        model: str = "default",
        *,
        api_key: str = "",
        temperature: float = 0.0,
        max_tokens: int = 2048,
        timeout_sec: float = 120.0,
        context_window: int | None = None,
    ) -> None:
        self.name = f"openai:{model}"
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.context_window = context_window
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.AsyncClient(headers=headers, timeout=timeout_sec)

    async def next_turn(
        self, messages: list[dict], tools: list[ToolSpec], *, context: PolicyContext
    ) -> AssistantTurn:
        request = {
            "model": self.model,
            "messages": messages,
            "tools": openai_tool_schemas(tools),
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        try:
            response = await self.client.post(self.url, json=request)
        except httpx.HTTPError as error:
            raise HarnessError(
                HarnessCode.INFERENCE,
                f"{self.url} could not be reached: {error!r}",
                detail=traceback.format_exc(),
            ) from error
        if response.status_code == 400 and _is_context_overflow(response.text):
            raise AgentError(
                AgentErrorCode.CONTEXT_OVERFLOW, f"the server refused the prompt: {response.text[:300]}"
            )
        if response.status_code != 200:
            raise HarnessError(
                HarnessCode.INFERENCE,
                f"{self.url} answered HTTP {response.status_code}",
                detail=response.text[:20000],
            )
        try:
            body = response.json()
            message = body["choices"][0]["message"]
            usage = body.get("usage") or {}
            return AssistantTurn(
                text=message.get("content") or "",
                tool_calls=message.get("tool_calls") or None,
                prompt_tokens=usage.get("prompt_tokens", 0),
                completion_tokens=usage.get("completion_tokens", 0),
            )
        except (ValueError, KeyError, IndexError, TypeError) as error:
            raise HarnessError(
                HarnessCode.INFERENCE,
                f"{self.url} answered something that is not a chat completion: {error!r}",
                detail=response.text[:20000],
            ) from error


def _is_context_overflow(body: str) -> bool:
    lowered = body.lower()
    return "context_length_exceeded" in lowered or "maximum context length" in lowered


class HFPolicy:
    """A transformers causal LM from a local folder (never downloads), on CPU by default.

    Greedy when `temperature` is 0, else sampled. Returns the generated token ids and, for each,
    its log-probability under the model's raw (temperature 1) distribution, which is what the
    trainer compares its own log-probabilities with. One generation at a time per policy (a lock):
    concurrent rollouts share the model without oversubscribing the CPU.
    """

    def __init__(
        self,
        path: Path,
        *,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        seed: int = 0,
        device: str = "cpu",
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.name = f"hf:{Path(path).name}"
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).to(device).eval()
        self.device = device
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.seed = seed
        self.context_window = getattr(self.model.config, "max_position_embeddings", None)
        self._lock = threading.Lock()

    async def next_turn(
        self, messages: list[dict], tools: list[ToolSpec], *, context: PolicyContext
    ) -> AssistantTurn:
        prompt = render_prompt(messages, tools, self.tokenizer)
        prompt_ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        room = (self.context_window or len(prompt_ids) + self.max_new_tokens) - len(prompt_ids)
        if room <= 0:
            raise AgentError(
                AgentErrorCode.CONTEXT_OVERFLOW,
                f"the prompt is {len(prompt_ids)} tokens, the context window {self.context_window}",
            )
        try:
            token_ids, logprobs = await asyncio.to_thread(
                self._generate, prompt_ids, min(room, self.max_new_tokens), context
            )
        except Exception as error:
            raise HarnessError(
                HarnessCode.INFERENCE, f"generation failed: {error!r}", detail=traceback.format_exc()
            ) from error
        return AssistantTurn(
            text=self.tokenizer.decode(token_ids, skip_special_tokens=True),
            prompt_tokens=len(prompt_ids),
            completion_tokens=len(token_ids),
            token_ids=token_ids,
            logprobs=logprobs,
        )

    def _generate(
        self, prompt_ids: list[int], max_new_tokens: int, context: PolicyContext
    ) -> tuple[list[int], list[float]]:
        import torch

        stop_ids = [self.tokenizer.eos_token_id]
        end_of_turn = self.tokenizer.convert_tokens_to_ids(END_OF_TURN)
        if isinstance(end_of_turn, int) and end_of_turn != self.tokenizer.unk_token_id:
            stop_ids.append(end_of_turn)
        sampled = self.temperature > 0
        with self._lock, torch.inference_mode():
            torch.manual_seed(self.seed + 1000 * context.sample + context.turn)
            input_ids = torch.tensor([prompt_ids], device=self.device)
            output = self.model.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=max_new_tokens,
                do_sample=sampled,
                temperature=self.temperature if sampled else None,
                top_p=None,
                top_k=None,
                eos_token_id=[token for token in stop_ids if token is not None] or None,
                pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id or 0,
                output_logits=True,
                return_dict_in_generate=True,
            )
            new_ids = output.sequences[0, len(prompt_ids) :]
            logits = torch.stack(output.logits, dim=1)[0].float()
            logprobs = torch.log_softmax(logits, dim=-1).gather(-1, new_ids[:, None]).squeeze(-1)
        return new_ids.tolist(), logprobs.tolist()
