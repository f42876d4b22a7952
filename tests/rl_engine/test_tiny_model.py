"""The built-in tiny model: deterministic from its seed, and speaking the harness's chat format."""

import hashlib
import json
from pathlib import Path
from typing import get_args

import pytest
import torch

from rl_engine.agent.chat_format import render_builtin, render_prompt
from rl_engine.models import BUILTIN_MODELS, TinyLlamaConfig, build_tiny_model, builtin_model
from rl_engine.sandbox.config import ToolSpec
from rl_engine.spec import BuiltinModelName

SMALL = TinyLlamaConfig(
    vocab_size=300, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
)
TOOLS = [
    ToolSpec(
        name="read_text",
        description="Read a text file",
        input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
    ),
    ToolSpec(name="submit_answer", description="Submit the final answer", input_schema={"type": "object"}),
]
CALLS = [
    {"id": "a", "type": "function", "function": {"name": "read_text", "arguments": '{"path": "notes.txt"}'}},
    {"id": "b", "type": "function", "function": {"name": "read_text", "arguments": '{"path": "b.txt"}'}},
]
CONVERSATIONS = {
    "system, tools, two calls and their results, then a reply": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is in notes.txt?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": CALLS},
        {"role": "tool", "tool_call_id": "a", "content": "hello"},
        {"role": "tool", "tool_call_id": "b", "content": "bye"},
        {"role": "assistant", "content": "It says hello."},
        {"role": "user", "content": "Thanks — and ünïcode?"},
    ],
    "no system message, ending on tool results": [
        {"role": "user", "content": "Read it."},
        {"role": "assistant", "content": None, "tool_calls": CALLS[:1]},
        {"role": "tool", "tool_call_id": "a", "content": "line 1\nline 2"},
    ],
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=3)


def digest(folder: Path, name: str) -> str:
    return hashlib.sha256((folder / name).read_bytes()).hexdigest()


def weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


class TestDeterminism:
    def test_the_same_seed_builds_the_same_tokenizer_and_weights(self, tmp_path):
        first = build_tiny_model(tmp_path / "a", seed=7, config=SMALL)
        second = build_tiny_model(tmp_path / "b", seed=7, config=SMALL)
        assert digest(first, "tokenizer.json") == digest(second, "tokenizer.json")
        a, b = weights(first), weights(second)
        assert a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)

    def test_another_seed_builds_other_weights_with_the_same_tokenizer(self, tmp_path):
        first = build_tiny_model(tmp_path / "a", seed=7, config=SMALL)
        other = build_tiny_model(tmp_path / "b", seed=8, config=SMALL)
        assert digest(first, "tokenizer.json") == digest(other, "tokenizer.json")
        assert not torch.equal(
            weights(first)["model.embed_tokens.weight"], weights(other)["model.embed_tokens.weight"]
        )

    def test_the_folder_records_how_it_was_built(self, tiny):
        recorded = json.loads((tiny / "practicum_builtin.json").read_text())
        assert recorded["seed"] == 3 and recorded["config"]["hidden_size"] == 64


class TestChatFormat:
    @pytest.mark.parametrize("name", list(CONVERSATIONS))
    def test_the_template_renders_exactly_the_harness_builtin_format(self, tiny, name):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tiny, local_files_only=True)
        messages = CONVERSATIONS[name]
        through_template = render_prompt(messages, TOOLS, tokenizer)
        builtin = render_builtin(
            messages,
            [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
                }
                for t in TOOLS
            ],
        )
        assert through_template == builtin
        assert render_prompt(messages, [], tokenizer) == render_builtin(messages, [])

    def test_tool_markup_is_one_token_each_and_survives_decoding(self, tiny):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tiny, local_files_only=True)
        for markup in ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"):
            assert len(tokenizer(markup, add_special_tokens=False)["input_ids"]) == 1
        text = '<tool_call>\n{"name": "read_text", "arguments": {"path": "a"}}\n</tool_call>'
        ids = tokenizer(text + "<|im_end|>", add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids, skip_special_tokens=True) == text
        assert ids[-1] == tokenizer.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")

    def test_the_model_loads_offline_and_scores_a_prompt(self, tiny):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tiny, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(tiny, local_files_only=True)
        ids = tokenizer(
            render_builtin(CONVERSATIONS["no system message, ending on tool results"], []),
            return_tensors="pt",
        )
        logits = model(**ids).logits
        assert logits.shape == (1, ids["input_ids"].shape[1], len(tokenizer))
        assert model.config.eos_token_id == tokenizer.eos_token_id


class TestBuiltinCache:
    def test_a_builtin_model_is_built_once_and_reused(self, tmp_path):
        folder = builtin_model("tiny-llama", seed=1, cache_dir=tmp_path)
        stamp = (folder / "model.safetensors").stat().st_mtime_ns
        assert builtin_model("tiny-llama", seed=1, cache_dir=tmp_path) == folder
        assert (folder / "model.safetensors").stat().st_mtime_ns == stamp
        assert [p.name for p in tmp_path.iterdir()] == ["tiny-llama-seed1"]

    def test_an_unknown_builtin_is_refused_with_the_known_names(self, tmp_path):
        with pytest.raises(ValueError, match="known: tiny-llama"):
            builtin_model("huge", cache_dir=tmp_path)

    def test_the_spec_offers_exactly_the_builtin_models(self):
        assert get_args(BuiltinModelName) == BUILTIN_MODELS
