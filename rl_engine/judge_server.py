"""A built-in, offline `llm_judge` endpoint: an OpenAI-compatible server over a local causal LM.

    python -m rl_engine.judge_server --model smollm2-135m-instruct|PATH --host 127.0.0.1 --port 8790

Serves `GET /v1/models` and `POST /v1/chat/completions`. A request whose `response_format` carries
the verdict schema (`grading.checks.VERDICT_SCHEMA`, what `grading.judge` sends) is answered by
`judge()`: a classification, not free text. The question "does the criterion hold?" is appended to
the chat and `is_criteria_true` is P(yes) > P(no) over the model's next token, so a verdict is
deterministic whatever the temperature; a short rationale is then generated greedily after the
chosen word. The reply is built with `json.dumps`, so even a random model always answers a valid
verdict. Any other request is plain generation (greedy at temperature 0, else seeded sampling).

One request runs at a time per model (a lock): a 135M model on a few CPU cores gains nothing from
interleaving. A prompt longer than the context window (the model's, capped by --context-tokens,
default 4096) is cut from the left of the evidence (the last user message; a leading "Criterion:"
paragraph is kept) with a note in the prompt, and the verdict's rationale says so. The served model
also answers to the name "default". SmolLM2-135M is a weak judge: this exists for the demo and for
CI plumbing; production points the run spec's `judge` section at a real endpoint.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rl_engine.agent.chat_format import END_OF_TURN, render_prompt

YES_WORDS = ("Yes", "yes", "YES", " Yes", " yes")
NO_WORDS = ("No", "no", "NO", " No", " no")
JUDGE_QUESTION = (
    "Question: judging only the evidence above, does the criterion hold? Answer with one word: Yes or No."
)
CLIP_NOTE = "[... {cut} tokens cut from the start to fit the judge's context window ...]\n"
DEFAULT_RATIONALE_TOKENS = 48
DEFAULT_MAX_TOKENS = 256
# A long prompt costs tens of seconds on a few CPU cores; a 135M judge gains little from more evidence.
DEFAULT_CONTEXT_TOKENS = 4096
# What `python -m rl_engine run --judge-url` sends when no --judge-model is given.
DEFAULT_ALIAS = "default"
# Tokens kept free beside the answer budget: re-tokenising clipped text is not exactly additive.
_SLACK = 8


@dataclass
class LoadedModel:
    name: str
    model: Any
    tokenizer: Any
    context_window: int
    rationale_tokens: int = DEFAULT_RATIONALE_TOKENS
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class JudgeResult:
    verdict: dict[str, Any]  # exactly {rationale, is_criteria_true}
    p_yes: float
    prompt_tokens: int
    completion_tokens: int
    clipped_tokens: int


@dataclass
class Completion:
    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    clipped_tokens: int


def resolve_model(model: str) -> Path:
    """A model folder, or a built-in name (built offline on first use)."""
    from rl_engine.models import BUILTIN_MODELS, builtin_model

    if Path(model).is_dir():
        return Path(model)
    if model in BUILTIN_MODELS:
        return builtin_model(model)
    raise ValueError(
        f"--model {model!r} is neither a model folder nor a built-in ({', '.join(BUILTIN_MODELS)})"
    )


def load_model(
    model: str,
    *,
    threads: int | None = None,
    context_tokens: int | None = None,
    rationale_tokens: int = DEFAULT_RATIONALE_TOKENS,
    name: str | None = None,
) -> LoadedModel:
    """Load a judge model on the CPU from a folder or a built-in name; never downloads."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    folder = resolve_model(model)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if threads:
        torch.set_num_threads(threads)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    loaded = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float32).eval()
    window = getattr(loaded.config, "max_position_embeddings", None) or 2048
    if context_tokens:
        window = min(window, context_tokens)
    return LoadedModel(
        name=name or (model if not Path(model).is_dir() else folder.name),
        model=loaded,
        tokenizer=tokenizer,
        context_window=window,
        rationale_tokens=rationale_tokens,
    )


# ---------------------------------------------------------------------------------------- scoring


def judge_verdict(
    model: Any,
    tokenizer: Any,
    messages: list[dict[str, Any]],
    *,
    context_window: int | None = None,
    rationale_tokens: int = DEFAULT_RATIONALE_TOKENS,
) -> dict[str, Any]:
    """The verdict `{rationale, is_criteria_true}` for `grading.checks.judge_messages(...)`, in process."""
    return judge(
        model, tokenizer, messages, context_window=context_window, rationale_tokens=rationale_tokens
    ).verdict


def judge(
    model: Any,
    tokenizer: Any,
    messages: list[dict[str, Any]],
    *,
    context_window: int | None = None,
    rationale_tokens: int = DEFAULT_RATIONALE_TOKENS,
) -> JudgeResult:
    """Score yes against no after the judge question, then explain the chosen word greedily."""
    import torch

    window = context_window or getattr(model.config, "max_position_embeddings", None) or 2048
    yes_ids, no_ids = _answer_token_ids(tokenizer)
    asked = [*messages, {"role": "user", "content": JUDGE_QUESTION}]
    evidence = _last_user_index(messages)
    budget = window - rationale_tokens - _SLACK - 4  # 4: the verdict word and ", because"
    ids, clipped = fit_prompt(tokenizer, asked, evidence, budget)

    logits, past = _forward(model, ids, None)
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    yes = torch.logsumexp(log_probs[yes_ids], dim=0).item()
    no = torch.logsumexp(log_probs[no_ids], dim=0).item()
    p_yes = 1.0 / (1.0 + math.exp(no - yes))
    met = yes > no

    word = "Yes" if met else "No"
    prefix = tokenizer(f"{word}, because", add_special_tokens=False)["input_ids"]
    generated: list[int] = []
    if rationale_tokens > 0:
        logits, past = _forward(model, prefix, past)
        generated, _ = _decode(
            model,
            tokenizer,
            past,
            logits,
            max_new=rationale_tokens,
            stop_ids=_stop_ids(tokenizer),
            stops=("\n",),
        )
    reason = _cut_at(tokenizer.decode(generated, skip_special_tokens=True), ("\n",)).strip()
    rationale = f"{word}, because {reason}" if reason else f"{word}."
    rationale += f" (local judge, P(yes) = {p_yes:.2f})"
    if clipped:
        rationale += f" The evidence was clipped: its first {clipped} tokens did not fit the context window."
    return JudgeResult(
        verdict={"rationale": rationale, "is_criteria_true": met},
        p_yes=p_yes,
        prompt_tokens=len(ids),
        completion_tokens=1 + len(generated),
        clipped_tokens=clipped,
    )


def complete(
    model: Any,
    tokenizer: Any,
    messages: list[dict[str, Any]],
    *,
    max_tokens: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int | None = None,
    stop: tuple[str, ...] = (),
    context_window: int | None = None,
) -> Completion:
    """Plain chat generation: greedy at temperature 0, else sampling (seeded when `seed` is given)."""
    import torch

    window = context_window or getattr(model.config, "max_position_embeddings", None) or 2048
    ids, clipped = fit_prompt(tokenizer, messages, _last_user_index(messages), window - max_tokens)
    generator = None
    if temperature > 0:
        generator = torch.Generator()
        if seed is None:
            generator.seed()
        else:
            generator.manual_seed(seed)
    logits, past = _forward(model, ids, None)
    tokens, finish = _decode(
        model,
        tokenizer,
        past,
        logits,
        max_new=max_tokens,
        stop_ids=_stop_ids(tokenizer),
        stops=stop,
        temperature=temperature,
        top_p=top_p,
        generator=generator,
    )
    text = _cut_at(tokenizer.decode(tokens, skip_special_tokens=True), stop)
    return Completion(text, finish, len(ids), len(tokens), clipped)


def fit_prompt(
    tokenizer: Any, messages: list[dict[str, Any]], evidence: int | None, budget: int
) -> tuple[list[int], int]:
    """Prompt ids within `budget` tokens, and how many evidence tokens were cut to get there.

    The evidence message loses tokens from its start (after a leading "Criterion:" paragraph), with
    a note saying how many; if even that cannot fit, only the prompt's last `budget` tokens are kept.
    """
    ids = _prompt_ids(tokenizer, messages)
    if len(ids) <= budget:
        return ids, 0
    if evidence is not None:
        content = messages[evidence]["content"]
        head, body = "", content
        if content.startswith("Criterion:") and "\n\n" in content:
            first, rest = content.split("\n\n", 1)
            head, body = first + "\n\n", rest
        body_ids = tokenizer(body, add_special_tokens=False)["input_ids"]
        cut = len(ids) - budget + len(tokenizer(CLIP_NOTE.format(cut=len(body_ids)))["input_ids"]) + _SLACK
        for _ in range(4):
            if cut >= len(body_ids):
                break
            shortened = head + CLIP_NOTE.format(cut=cut) + tokenizer.decode(body_ids[cut:])
            trial = [*messages]
            trial[evidence] = {**messages[evidence], "content": shortened}
            ids = _prompt_ids(tokenizer, trial)
            if len(ids) <= budget:
                return ids, cut
            cut += len(ids) - budget + _SLACK
    return ids[-budget:], len(ids) - budget


def _prompt_ids(tokenizer: Any, messages: list[dict[str, Any]]) -> list[int]:
    return tokenizer(render_prompt(messages, [], tokenizer), add_special_tokens=False)["input_ids"]


def _last_user_index(messages: list[dict[str, Any]]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index]["role"] == "user":
            return index
    return None


def _answer_token_ids(tokenizer: Any) -> tuple[list[int], list[int]]:
    """First tokens of the spellings of yes and of no; a token both start with decides nothing."""

    def first_tokens(words: tuple[str, ...]) -> set[int]:
        found = set()
        for word in words:
            ids = tokenizer(word, add_special_tokens=False)["input_ids"]
            if ids:
                found.add(ids[0])
        return found

    yes, no = first_tokens(YES_WORDS), first_tokens(NO_WORDS)
    yes, no = yes - no, no - yes
    if not yes or not no:
        raise ValueError("the tokenizer cannot tell 'yes' from 'no' by their first token")
    return sorted(yes), sorted(no)


def _stop_ids(tokenizer: Any) -> set[int]:
    stops = {tokenizer.eos_token_id}
    end = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    if isinstance(end, int) and end != tokenizer.unk_token_id:
        stops.add(end)
    return {token for token in stops if isinstance(token, int)}


def _forward(model: Any, ids: list[int], past: Any) -> tuple[Any, Any]:
    import torch

    with torch.inference_mode():
        # Only the last position's logits: a full-prompt lm_head would be (tokens × vocab) floats.
        out = model(input_ids=torch.tensor([ids]), cache=past, use_cache=True, logits_to_keep=1)
    return out.logits[0, -1], out.cache


def _decode(
    model: Any,
    tokenizer: Any,
    past: Any,
    logits: Any,
    *,
    max_new: int,
    stop_ids: set[int],
    stops: tuple[str, ...] = (),
    temperature: float = 0.0,
    top_p: float = 1.0,
    generator: Any = None,
) -> tuple[list[int], str]:
    """Up to `max_new` tokens after `logits`, reusing the KV cache; ("stop" | "length")."""
    import torch

    tokens: list[int] = []
    for step in range(max_new):
        if temperature <= 0:
            token = int(torch.argmax(logits))
        else:
            probs = torch.softmax(logits.float() / temperature, dim=-1)
            if top_p < 1.0:
                ordered, order = torch.sort(probs, descending=True)
                outside = torch.cumsum(ordered, dim=-1) - ordered > top_p
                probs = probs.clone()
                probs[order[outside]] = 0.0
            token = int(torch.multinomial(probs, 1, generator=generator))
        if token in stop_ids:
            return tokens, "stop"
        tokens.append(token)
        if stops and any(s in tokenizer.decode(tokens, skip_special_tokens=True) for s in stops):
            return tokens, "stop"
        if step + 1 < max_new:
            logits, past = _forward(model, [token], past)
    return tokens, "length"


def _cut_at(text: str, stops: tuple[str, ...]) -> str:
    for stop in stops:
        if stop in text:
            text = text.split(stop, 1)[0]
    return text


# ---------------------------------------------------------------------------------------- HTTP


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _TextPart(_Request):
    type: Literal["text"]
    text: str


class _Message(_Request):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[_TextPart] | None = None

    def as_chat(self) -> dict[str, str]:
        content = self.content
        if isinstance(content, list):
            content = "".join(part.text for part in content)
        return {"role": "system" if self.role == "developer" else self.role, "content": content or ""}


class _JsonSchema(_Request):
    name: str = "response"
    json_schema: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None


class _ResponseFormat(_Request):
    type: Literal["text", "json_schema"]
    json_schema: _JsonSchema | None = None


class ChatRequest(_Request):
    model: str
    messages: list[_Message] = Field(min_length=1)
    temperature: float = Field(default=1.0, ge=0, le=2)
    top_p: float = Field(default=1.0, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    n: Literal[1] = 1
    stream: Literal[False] = False
    seed: int | None = None
    stop: str | list[str] | None = None
    response_format: _ResponseFormat | None = None


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None, status: int = 400, code: str | None = None) -> None:
        super().__init__(message)
        self.message, self.param, self.status, self.code = message, param, status, code


def _location(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part in ("str", "list[_TextPart]", "none", "function-after"):
            continue  # pydantic names the union member it tried, not a field
        else:
            text += f".{part}" if text else str(part)
    return text


def parse_request(body: Any) -> ChatRequest:
    """A validated request, or BadRequest naming a field that is wrong."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object", None)
    try:
        request = ChatRequest.model_validate(body)
    except ValidationError as error:
        # The deepest error: a union (`content`: text or parts) reports every member it tried.
        first = max(error.errors(), key=lambda problem: len(problem["loc"]))
        param = _location(first["loc"]) or None
        raise BadRequest(f"{param}: {first['msg']}" if param else first["msg"], param) from None
    fmt = request.response_format
    if fmt is not None and fmt.type == "json_schema":
        if fmt.json_schema is None:
            raise BadRequest(
                "response_format.json_schema: required when type is json_schema",
                "response_format.json_schema",
            )
        if not is_verdict_schema(fmt.json_schema.json_schema):
            raise BadRequest(
                "response_format.json_schema.schema: the built-in judge answers only the verdict schema "
                "{rationale: string, is_criteria_true: boolean} (rl_engine.grading.checks.VERDICT_SCHEMA)",
                "response_format.json_schema.schema",
            )
    return request


def is_verdict_schema(schema: Any) -> bool:
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        return False
    properties = schema.get("properties")
    if not isinstance(properties, dict) or set(properties) != {"rationale", "is_criteria_true"}:
        return False
    return (properties["rationale"] or {}).get("type") == "string" and (
        properties["is_criteria_true"] or {}
    ).get("type") == "boolean"


def answer(loaded: LoadedModel, request: ChatRequest) -> dict[str, Any]:
    """The OpenAI chat.completion object for a validated request (runs the model under its lock)."""
    if request.model not in (loaded.name, DEFAULT_ALIAS):
        raise BadRequest(
            f"model: {request.model!r} is not served here; this server serves {loaded.name!r} "
            f"(also as {DEFAULT_ALIAS!r})",
            "model",
            status=404,
            code="model_not_found",
        )
    messages = [message.as_chat() for message in request.messages]
    limit = request.max_completion_tokens or request.max_tokens
    fmt = request.response_format
    if fmt is not None and fmt.type == "json_schema":
        rationale_tokens = (
            loaded.rationale_tokens if limit is None else min(loaded.rationale_tokens, limit - 1)
        )
        with loaded.lock:
            result = judge(
                loaded.model,
                loaded.tokenizer,
                messages,
                context_window=loaded.context_window,
                rationale_tokens=rationale_tokens,
            )
        content, finish = json.dumps(result.verdict, ensure_ascii=False), "stop"
        counts = (result.prompt_tokens, result.completion_tokens, result.clipped_tokens)
    else:
        max_tokens = limit or min(DEFAULT_MAX_TOKENS, loaded.context_window // 2)
        if max_tokens >= loaded.context_window - _SLACK:
            raise BadRequest(
                f"max_tokens: {max_tokens} leaves no room for a prompt in the {loaded.context_window}-token "
                "context window",
                "max_tokens",
            )
        stops = (request.stop,) if isinstance(request.stop, str) else tuple(request.stop or ())
        with loaded.lock:
            done = complete(
                loaded.model,
                loaded.tokenizer,
                messages,
                max_tokens=max_tokens,
                temperature=request.temperature,
                top_p=request.top_p,
                seed=request.seed,
                stop=stops,
                context_window=loaded.context_window,
            )
        content, finish = done.text, done.finish_reason
        counts = (done.prompt_tokens, done.completion_tokens, done.clipped_tokens)
    prompt_tokens, completion_tokens, clipped = counts
    reply: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": loaded.name,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish,
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
    if clipped:
        reply["notes"] = [
            f"the prompt was clipped: {clipped} tokens cut from the start of the last user message"
        ]
    return reply


def _error(message: str, param: str | None, status: int, code: str | None = None) -> Any:
    from starlette.responses import JSONResponse

    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": param, "code": code}}, status_code=status
    )


def create_app(loaded: LoadedModel) -> Any:
    """The Starlette app serving one loaded model."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def models(request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "object": "list",
                "data": [{"id": loaded.name, "object": "model", "created": 0, "owned_by": "practicum"}],
            }
        )

    async def chat_completions(request: Request) -> Any:
        try:
            body = json.loads(await request.body())
        except ValueError as error:
            return _error(f"the request body is not JSON: {error}", None, 400)
        try:
            parsed = parse_request(body)
            return JSONResponse(await run_in_threadpool(answer, loaded, parsed))
        except BadRequest as bad:
            return _error(bad.message, bad.param, bad.status, bad.code)
        except Exception as error:  # the model's own failure: say what it was, keep serving
            return _error(f"the judge model failed: {type(error).__name__}: {error}", None, 500)

    return Starlette(
        routes=[
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        ]
    )


def serve(loaded: LoadedModel, *, host: str, port: int, log_level: str = "info") -> None:
    """Serve until interrupted; prints `judge <name> ready at <url>` once the socket accepts requests."""
    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}/v1"

    class _Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if not self.should_exit:
                print(f"judge {loaded.name} ready at {url}", flush=True)

    _Server(uvicorn.Config(create_app(loaded), log_level=log_level, access_log=False)).run(sockets=[sock])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rl_engine.judge_server", description="A local OpenAI-compatible llm_judge endpoint."
    )
    parser.add_argument("--model", default="smollm2-135m-instruct", help="a built-in name or a model folder")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8790, help="0 picks a free port (printed)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's)")
    parser.add_argument(
        "--context-tokens",
        type=int,
        default=DEFAULT_CONTEXT_TOKENS,
        help="clip prompts to this many tokens (0: the model's whole window)",
    )
    parser.add_argument("--rationale-tokens", type=int, default=DEFAULT_RATIONALE_TOKENS)
    parser.add_argument("--served-name", default=None, help="the model id clients send (default: --model)")
    parser.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    args = parser.parse_args(argv)
    try:
        loaded = load_model(
            args.model,
            threads=args.threads,
            context_tokens=args.context_tokens,
            rationale_tokens=args.rationale_tokens,
            name=args.served_name,
        )
    except Exception as error:
        print(f"cannot load the judge model: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    serve(loaded, host=args.host, port=args.port, log_level=args.log_level)
    return 0


if __name__ == "__main__":
    sys.exit(main())
