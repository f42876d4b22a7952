"""An OpenAI-compatible `/chat/completions` endpoint (vLLM serve, SGLang, llama.cpp, hosted APIs).

Evaluation only: the endpoint hides token ids, so nothing generated here can be trained on.
Log-probs are returned when the server gives them (`logprobs: true` is asked for); tool calls the
server splits out come back as OpenAI `tool_calls`. Weights cannot be loaded into a remote server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from rl_engine.inference.base import (
    ChatPrompt,
    Generation,
    InferenceFailure,
    Prompt,
    SamplingParams,
    check_prompts,
)


class OpenAIEngine:
    token_level = False

    def __init__(
        self,
        base_url: str,
        model: str = "default",
        *,
        api_key: str = "",
        timeout_sec: float = 120.0,
        request_logprobs: bool = True,
    ) -> None:
        self.name = f"openai:{model}"
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.request_logprobs = request_logprobs
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(headers=headers, timeout=timeout_sec)

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[Generation]:
        check_prompts(prompts, token_level=False, backend="openai")
        return [self._one(prompt, params) for prompt in prompts if isinstance(prompt, ChatPrompt)]

    def _one(self, prompt: ChatPrompt, params: SamplingParams) -> Generation:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": prompt.messages,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_new_tokens,
            "logprobs": self.request_logprobs,
        }
        if prompt.tools:
            request["tools"] = prompt.tools
        if params.seed is not None:
            request["seed"] = params.seed
        try:
            response = self.client.post(self.url, json=request)
        except httpx.HTTPError as error:
            raise InferenceFailure(f"{self.url} could not be reached: {error!r}") from error
        if response.status_code != 200:
            raise InferenceFailure(f"{self.url} answered HTTP {response.status_code}: {response.text[:500]}")
        try:
            body = response.json()
            choice = body["choices"][0]
            message = choice["message"]
            content_logprobs = (choice.get("logprobs") or {}).get("content")
            return Generation(
                text=message.get("content") or "",
                finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
                logprobs=[float(item["logprob"]) for item in content_logprobs] if content_logprobs else None,
                tool_calls=message.get("tool_calls") or None,
                prompt_tokens=(body.get("usage") or {}).get("prompt_tokens", 0),
            )
        except (ValueError, KeyError, IndexError, TypeError) as error:
            raise InferenceFailure(
                f"{self.url} answered something that is not a chat completion: {error!r}: {response.text[:500]}"
            ) from error

    def load_weights(self, state_dict: Mapping[str, Any]) -> None:
        raise NotImplementedError("the openai backend serves a remote model; its weights cannot be loaded")

    def sync_from(self, model: Any) -> None:
        raise NotImplementedError("the openai backend serves a remote model; its weights cannot be synced")

    def close(self) -> None:
        self.client.close()
