"""A training policy over an inference engine: concurrent rollouts share batched generation, and
each rollout's token sequence (with its loss mask and rollout log-probs) is recorded as it grows.

`BatchingEngine` gathers the generation requests of concurrent rollouts for a moment and sends
them to the engine as one batch (one forward pass per token for the whole batch instead of one
per rollout). `EnginePolicy` is one rollout's policy: it feeds the engine the episode's exact
token sequence (see `rl_engine.sequences`) and keeps it for the trainer in `sequence`.
"""

from __future__ import annotations

import asyncio
import traceback
from typing import TYPE_CHECKING, Any

from rl_engine.agent.policy import AssistantTurn, PolicyContext
from rl_engine.inference.base import Generation, InferenceEngine, InferenceFailure, SamplingParams
from rl_engine.outcomes import AgentError, AgentErrorCode, HarnessCode, HarnessError
from rl_engine.sequences import SequenceBuilder, SequenceError, TokenSequence

if TYPE_CHECKING:
    from rl_engine.sandbox import ToolSpec


class BatchingEngine:
    """Collects concurrent `generate_one` calls (same sampling settings) into engine batches."""

    def __init__(self, engine: InferenceEngine, *, wait_sec: float = 0.005) -> None:
        self.engine = engine
        self.wait_sec = wait_sec
        self._queue: list[tuple[list[int], SamplingParams, asyncio.Future[Generation]]] = []
        self._worker: asyncio.Task | None = None
        self.batches = 0
        self.requests = 0

    async def generate_one(self, prompt_ids: list[int], params: SamplingParams) -> Generation:
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        self._queue.append((prompt_ids, params, future))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._serve())
        return await future

    async def _serve(self) -> None:
        while self._queue:
            await asyncio.sleep(self.wait_sec)  # let the other rollouts' requests arrive
            params = self._queue[0][1]
            # Requests differ by seed across samples; the batch takes the first one's seed.
            key = params.model_dump(exclude={"seed"})
            batch, rest = [], []
            for item in self._queue:
                (batch if item[1].model_dump(exclude={"seed"}) == key else rest).append(item)
            self._queue = rest
            try:
                results = await asyncio.to_thread(self.engine.generate, [item[0] for item in batch], params)
            except Exception as error:
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(error)
                continue
            self.batches += 1
            self.requests += len(batch)
            for (_, _, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)


class EnginePolicy:
    """One rollout's policy. Reset at turn 0, so a retried attempt starts a fresh sequence."""

    def __init__(
        self,
        engine: BatchingEngine,
        tokenizer: Any,
        params: SamplingParams,
        *,
        context_window: int | None = None,
        name: str | None = None,
    ) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.params = params
        self.context_window = context_window
        self.name = name or engine.engine.name
        self.builder: SequenceBuilder | None = None

    @property
    def sequence(self) -> TokenSequence | None:
        return self.builder.sequence if self.builder else None

    async def next_turn(
        self, messages: list[dict[str, Any]], tools: list[ToolSpec], *, context: PolicyContext
    ) -> AssistantTurn:
        if context.turn == 0 or self.builder is None:
            self.builder = SequenceBuilder(self.tokenizer, tools)
        try:
            prompt_ids = self.builder.prompt_ids(messages)
        except SequenceError as error:
            raise HarnessError(HarnessCode.INFERENCE, str(error), detail=traceback.format_exc()) from error
        max_new = self.params.max_new_tokens
        if self.context_window:
            room = self.context_window - len(prompt_ids)
            if room <= 0:
                raise AgentError(
                    AgentErrorCode.CONTEXT_OVERFLOW,
                    f"the sequence is {len(prompt_ids)} tokens, the context window {self.context_window}",
                )
            max_new = min(max_new, room)
        seed = None if self.params.seed is None else self.params.seed + 1000 * context.sample + context.turn
        params = self.params.model_copy(update={"max_new_tokens": max_new, "seed": seed})
        try:
            generation = await self.engine.generate_one(prompt_ids, params)
        except InferenceFailure as error:
            raise HarnessError(HarnessCode.INFERENCE, str(error), detail=traceback.format_exc()) from error
        token_ids = generation.token_ids or []
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        self.builder.add_turn(token_ids, generation.logprobs, text)
        return AssistantTurn(
            text=text,
            prompt_tokens=len(prompt_ids),
            completion_tokens=len(token_ids),
            token_ids=token_ids,
            logprobs=generation.logprobs,
        )
