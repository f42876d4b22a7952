"""One contract for every inference backend that can run here: hf always, openai against a real
local HTTP server (itself generating with the tiny model), vllm where it is installed with a GPU."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from rl_engine.inference import ChatPrompt, InferenceFailure, SamplingParams
from rl_engine.inference.hf import HFEngine
from rl_engine.inference.openai_engine import OpenAIEngine
from rl_engine.inference.vllm_engine import vllm_available
from tests.rl_engine.tiny_model import build_tiny_model

BACKENDS = ["hf", "openai", "vllm"]
PROMPTS = [
    ChatPrompt(messages=[{"role": "user", "content": "Read notes.txt"}]),
    ChatPrompt(messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "growth?"}]),
    ChatPrompt(messages=[{"role": "user", "content": "The adjusted APAC growth is"}]),
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def served_engine(model_dir):
    """A real OpenAI-compatible server on 127.0.0.1 whose completions come from the tiny model."""
    backing = HFEngine.from_pretrained(model_dir, device="cpu")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path != "/v1/chat/completions":
                self.send_error(404)
                return
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            params = SamplingParams(
                temperature=request.get("temperature", 1.0),
                top_p=request.get("top_p", 1.0),
                max_new_tokens=request.get("max_tokens", 16),
                seed=request.get("seed"),
            )
            prompt = ChatPrompt(messages=request["messages"], tools=request.get("tools") or [])
            generation = backing.generate([prompt], params)[0]
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": generation.text},
                "finish_reason": generation.finish_reason,
            }
            if request.get("logprobs"):
                choice["logprobs"] = {"content": [{"token": "", "logprob": lp} for lp in generation.logprobs]}
            body = json.dumps(
                {"choices": [choice], "usage": {"prompt_tokens": generation.prompt_tokens}}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    engine = OpenAIEngine(f"http://127.0.0.1:{server.server_port}/v1", "tiny")
    yield engine
    engine.close()
    server.shutdown()


@pytest.fixture(params=BACKENDS)
def engine(request, model_dir):
    if request.param == "hf":
        return HFEngine.from_pretrained(model_dir, device="cpu", max_batch_size=2)
    if request.param == "openai":
        return request.getfixturevalue("served_engine")
    if not (vllm_available() and torch.cuda.is_available()):
        if os.environ.get("CI") == "true" and os.environ.get("PRACTICUM_GPU") == "true":
            pytest.fail("vllm and a GPU are required on a GPU CI runner")
        pytest.skip("the vllm backend needs the vllm package and a CUDA GPU; neither is here")
    from rl_engine.inference.vllm_engine import VLLMEngine

    return VLLMEngine(model_dir, gpu_memory_utilization=0.2, dtype="float32")


def greedy(max_new_tokens: int = 8) -> SamplingParams:
    return SamplingParams(temperature=0, max_new_tokens=max_new_tokens)


def test_it_returns_one_generation_per_prompt_in_order(engine):
    together = engine.generate(PROMPTS, greedy())
    alone = [engine.generate([prompt], greedy())[0] for prompt in PROMPTS]
    assert [g.text for g in together] == [g.text for g in alone]
    assert len({g.text for g in together}) > 1  # different prompts, different continuations


def test_it_stops_at_the_token_budget_and_says_so(engine):
    for generation in engine.generate(PROMPTS, greedy(max_new_tokens=3)):
        if generation.token_ids is not None:
            assert 1 <= len(generation.token_ids) <= 3
            assert generation.finish_reason == ("length" if len(generation.token_ids) == 3 else "stop")
        assert generation.finish_reason in ("stop", "length")


def test_greedy_generation_is_deterministic(engine):
    assert [g.text for g in engine.generate(PROMPTS, greedy())] == [
        g.text for g in engine.generate(PROMPTS, greedy())
    ]


def test_seeded_sampling_is_reproducible_and_differs_by_seed(engine):
    def sample(seed: int) -> list[str]:
        params = SamplingParams(temperature=1.0, max_new_tokens=12, seed=seed)
        return [g.text for g in engine.generate(PROMPTS, params)]

    assert sample(1) == sample(1)
    assert sample(1) != sample(2)


def test_log_probs_are_one_per_generated_token_and_not_positive(engine):
    for generation in engine.generate(PROMPTS, SamplingParams(temperature=1.0, max_new_tokens=6, seed=3)):
        assert generation.logprobs is not None
        if generation.token_ids is not None:
            assert len(generation.logprobs) == len(generation.token_ids)
        assert all(lp <= 1e-6 for lp in generation.logprobs)


def test_token_prompts_are_refused_by_chat_only_backends_and_taken_by_the_others(engine):
    ids = [5, 6, 7, 8]
    if not engine.token_level:
        with pytest.raises(ValueError, match="takes chat prompts"):
            engine.generate([ids], greedy())
        return
    generation = engine.generate([ids], greedy(4))[0]
    assert generation.prompt_tokens == 4 and generation.token_ids


def test_log_probs_are_those_of_the_sampling_distribution(engine, model_dir):
    """A fresh forward pass of the same weights, logits / temperature, gives the same log-probs."""
    if not engine.token_level:
        pytest.skip("an OpenAI endpoint returns no token ids to rescore")
    temperature = 0.7
    prompt = [5, 6, 7, 8, 9]
    generation = engine.generate([prompt], SamplingParams(temperature=temperature, max_new_tokens=8, seed=5))[
        0
    ]
    scorer = HFEngine.from_pretrained(model_dir, device="cpu").model
    sequence = torch.tensor([prompt + generation.token_ids])
    with torch.no_grad():
        logits = scorer(sequence).logits[0, len(prompt) - 1 : -1].float() / temperature
    expected = logits.log_softmax(-1).gather(-1, torch.tensor(generation.token_ids)[:, None]).squeeze(-1)
    assert torch.allclose(torch.tensor(generation.logprobs), expected, atol=2e-3)


def test_loaded_weights_change_what_it_generates(engine, model_dir):
    if not engine.token_level:
        with pytest.raises(NotImplementedError, match="remote model"):
            engine.load_weights({})
        return
    before = [g.token_ids for g in engine.generate(PROMPTS, greedy())]
    source = HFEngine.from_pretrained(model_dir, device="cpu")
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in source.model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.5)
    engine.sync_from(source.model)
    after = [g.token_ids for g in engine.generate(PROMPTS, greedy())]
    assert after != before
    engine.sync_from(HFEngine.from_pretrained(model_dir, device="cpu").model)
    assert [g.token_ids for g in engine.generate(PROMPTS, greedy())] == before


def test_a_server_that_is_down_is_an_inference_failure():
    engine = OpenAIEngine("http://127.0.0.1:9/v1", "nothing", timeout_sec=2)
    with pytest.raises(InferenceFailure, match="could not be reached"):
        engine.generate(PROMPTS[:1], greedy())


def test_hf_sampled_log_probs_equal_a_scoring_pass_over_the_finished_sequence(model_dir):
    engine = HFEngine.from_pretrained(model_dir, device="cpu")
    temperature = 0.7
    prompts = [engine.prompt_ids(prompt) for prompt in PROMPTS]
    generations = engine.generate(
        prompts, SamplingParams(temperature=temperature, max_new_tokens=10, seed=11)
    )
    for prompt, generation in zip(prompts, generations, strict=True):
        sequence = torch.tensor([prompt + generation.token_ids])
        with torch.no_grad():
            logits = engine.model(sequence).logits[0, len(prompt) - 1 : -1] / temperature
        targets = torch.tensor(generation.token_ids)[:, None]
        expected = logits.log_softmax(-1).gather(-1, targets).squeeze(-1)
        assert torch.allclose(torch.tensor(generation.logprobs), expected, atol=1e-5)


# The hf backend's lean decode loop (`inference/lean_decode.py`) against transformers itself.


def rescored(model, prompt: list[int], generation, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """Log-probs of the generated tokens from one forward pass over the finished sequence."""
    from transformers.generation.logits_process import TopPLogitsWarper

    sequence = torch.tensor([prompt + generation.token_ids], device=model.device)
    with torch.no_grad():
        logits = model(sequence).logits[0, len(prompt) - 1 : -1].float()
    if temperature > 0:
        logits = logits / temperature
    if top_p < 1:
        logits = TopPLogitsWarper(top_p)(None, logits)
    targets = torch.tensor(generation.token_ids, device=logits.device)[:, None]
    return logits.log_softmax(-1).gather(-1, targets).squeeze(-1).cpu()


@pytest.fixture(scope="module")
def lean_engine(model_dir):
    engine = HFEngine.from_pretrained(model_dir, device="cpu")
    assert engine.decoder == "lean"
    return engine


@pytest.fixture(scope="module")
def mixed_prompts(lean_engine):
    """Different lengths (left padding) and repeated prompts (shared prefill), as GRPO batches hold."""
    chat = [lean_engine.prompt_ids(prompt) for prompt in PROMPTS]
    return [chat[0], chat[0], chat[1], [5, 6, 7, 8, 9], chat[2], chat[1], chat[0]]


def test_hf_lean_loop_gives_generates_greedy_tokens_and_log_probs(lean_engine, mixed_prompts):
    reference = HFEngine(lean_engine.model, lean_engine.tokenizer, lean=False)
    assert reference.decoder == "generate"
    lean = lean_engine.generate(mixed_prompts, greedy(12))
    library = reference.generate(mixed_prompts, greedy(12))
    assert [g.token_ids for g in lean] == [g.token_ids for g in library]
    assert [g.finish_reason for g in lean] == [g.finish_reason for g in library]
    for ours, theirs in zip(lean, library, strict=True):
        assert torch.allclose(torch.tensor(ours.logprobs), torch.tensor(theirs.logprobs), atol=1e-5)


def test_hf_shared_prompt_prefill_equals_prefilling_every_row_alone(lean_engine, mixed_prompts):
    together = lean_engine.generate(mixed_prompts, greedy(10))
    alone = [lean_engine.generate([prompt], greedy(10))[0] for prompt in mixed_prompts]
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    for shared, single in zip(together, alone, strict=True):
        assert torch.allclose(torch.tensor(shared.logprobs), torch.tensor(single.logprobs), atol=1e-5)


def test_hf_a_group_of_one_prompt_gets_independent_samples(lean_engine, mixed_prompts):
    group = lean_engine.generate(
        [mixed_prompts[0]] * 4, SamplingParams(temperature=1.0, max_new_tokens=10, seed=2)
    )
    assert len({tuple(g.token_ids) for g in group}) == 4


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 1.0), (0.8, 0.5)])
def test_hf_lean_log_probs_equal_a_forward_pass_under_the_sampling_distribution(
    lean_engine, mixed_prompts, temperature, top_p
):
    params = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=10, seed=7)
    for prompt, generation in zip(mixed_prompts, lean_engine.generate(mixed_prompts, params), strict=True):
        expected = rescored(lean_engine.model, prompt, generation, temperature, top_p)
        assert torch.isfinite(expected).all()
        assert torch.allclose(torch.tensor(generation.logprobs), expected, atol=1e-5)


def test_hf_lean_loop_follows_weights_changed_in_place(model_dir, mixed_prompts):
    """An optimiser step on a shared model changes parameters in place, without `load_weights`."""
    engine = HFEngine.from_pretrained(model_dir, device="cpu")
    before = [g.token_ids for g in engine.generate(mixed_prompts, greedy())]
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in engine.model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.5)
    after = engine.generate(mixed_prompts, greedy())
    assert [g.token_ids for g in after] != before
    reference = HFEngine(engine.model, engine.tokenizer, lean=False).generate(mixed_prompts, greedy())
    assert [g.token_ids for g in after] == [g.token_ids for g in reference]


def small_model(kind: str, vocab_size: int):
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    torch.manual_seed(0)
    shape = dict(vocab_size=vocab_size, hidden_size=48, intermediate_size=96, num_hidden_layers=2)
    if kind == "qwen2-gqa":  # attention biases, two query heads per key/value head
        model = Qwen2ForCausalLM(Qwen2Config(**shape, num_attention_heads=4, num_key_value_heads=2))
    elif kind == "llama-biases":
        config = LlamaConfig(**shape, num_attention_heads=3, attention_bias=True, mlp_bias=True)
        model = LlamaForCausalLM(config)
    else:
        model = GPT2LMHeadModel(GPT2Config(vocab_size=vocab_size, n_embd=32, n_layer=1, n_head=4))
    with torch.no_grad():  # biases start at zero and weights near it; make both count
        for name, parameter in model.named_parameters():
            if not name.endswith("norm.weight"):
                parameter.normal_(0, 0.5 if name.endswith("bias") else 0.2)
    return model.eval()


@pytest.mark.parametrize(
    ("kind", "decoder"), [("qwen2-gqa", "lean"), ("llama-biases", "lean"), ("gpt2", "generate")]
)
def test_hf_other_architectures_are_exact_or_fall_back_to_generate(lean_engine, mixed_prompts, kind, decoder):
    tokenizer = lean_engine.tokenizer
    engine = HFEngine(small_model(kind, len(tokenizer)), tokenizer)
    assert engine.decoder == decoder
    reference = HFEngine(engine.model, tokenizer, lean=False)
    assert [g.token_ids for g in engine.generate(mixed_prompts, greedy())] == [
        g.token_ids for g in reference.generate(mixed_prompts, greedy())
    ]
    params = SamplingParams(temperature=0.9, top_p=0.8, max_new_tokens=8, seed=4)
    for prompt, generation in zip(mixed_prompts, engine.generate(mixed_prompts, params), strict=True):
        expected = rescored(engine.model, prompt, generation, 0.9, 0.8)
        assert torch.allclose(torch.tensor(generation.logprobs), expected, atol=1e-5)


def test_hf_lean_loop_in_bfloat16_stays_close_to_the_model(model_dir, mixed_prompts):
    engine = HFEngine.from_pretrained(model_dir, device="cpu")
    engine.model.to(torch.bfloat16)
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=1)
    for prompt, generation in zip(mixed_prompts, engine.generate(mixed_prompts, params), strict=True):
        expected = rescored(engine.model, prompt, generation, 1.0)
        assert torch.allclose(torch.tensor(generation.logprobs), expected, atol=0.05)


def test_hf_lean_kv_cache_grows_past_its_first_chunk(lean_engine, mixed_prompts, monkeypatch):
    from rl_engine.inference import lean_decode

    expected = lean_engine.generate(mixed_prompts, greedy(12))
    monkeypatch.setattr(lean_decode, "CACHE_CHUNK", 2)  # grows 2 → 4 → 8 → 12 new-token slots
    grown = lean_engine.generate(mixed_prompts, greedy(12))
    assert [g.token_ids for g in grown] == [g.token_ids for g in expected]
    for after, before in zip(grown, expected, strict=True):
        assert torch.allclose(torch.tensor(after.logprobs), torch.tensor(before.logprobs), atol=1e-6)
