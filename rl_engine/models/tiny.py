"""A tiny random Llama with a byte-level BPE tokenizer and a tool-calling chat template, built offline.

Everything is derived from a seed and a fixed corpus, so the same seed gives the same folder
contents on every machine: tests and the "it learns" proof need a model without a download.
The chat template renders exactly what `rl_engine.agent.chat_format.render_builtin` renders
(ChatML with Hermes/Qwen `<tool_call>` blocks), so the HF policy's prompts are the same text whether
it goes through the tokenizer's template or the built-in one. `<tool_call>` and its siblings are
added as whole, non-special tokens: one token to emit, and still kept when text is decoded with
`skip_special_tokens=True`.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from rl_engine.tool_names import ALL_TOOLS

BUILTIN_MODELS: tuple[str, ...] = ("tiny-llama",)

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TOOL_MARKUP_TOKENS = (
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<tools>",
    "</tools>",
)

_TOOLS_PREAMBLE = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
_TOOLS_POSTAMBLE = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n"
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)


def _literal(text: str) -> str:
    """Text as a Jinja string expression, so whitespace control never touches it."""
    return "{{ " + json.dumps(text) + " }}"


# Every literal goes through {{ "..." }}: the template's own line breaks are stripped by `-`.
CHAT_TEMPLATE = "".join(
    [
        "{%- set ns = namespace(system='', results='') -%}",
        "{%- set rest = messages -%}",
        "{%- if messages and messages[0].role == 'system' -%}",
        "{%- set ns.system = messages[0].content -%}{%- set rest = messages[1:] -%}",
        "{%- endif -%}",
        _literal("<|im_start|>system\n"),
        "{{- ns.system -}}",
        "{%- if tools -%}",
        _literal(_TOOLS_PREAMBLE),
        "{%- for tool in tools -%}{{- tool | tojson -}}{%- if not loop.last -%}",
        _literal("\n"),
        "{%- endif -%}{%- endfor -%}",
        _literal(_TOOLS_POSTAMBLE),
        "{%- endif -%}",
        _literal("<|im_end|>\n"),
        "{%- for message in rest -%}",
        "{%- if message.role == 'tool' -%}",
        "{%- set block = '<tool_response>\\n' ~ message.content ~ '\\n</tool_response>' -%}",
        "{%- set ns.results = (ns.results ~ '\\n' ~ block) if ns.results else block -%}",
        "{%- else -%}",
        "{%- if ns.results -%}",
        _literal("<|im_start|>user\n"),
        "{{- ns.results -}}",
        _literal("<|im_end|>\n"),
        "{%- set ns.results = '' -%}",
        "{%- endif -%}",
        "{{- '<|im_start|>' ~ message.role ~ '\\n' -}}",
        "{{- message.content or '' -}}",
        "{%- if message.role == 'assistant' and message.tool_calls -%}",
        "{%- for call in message.tool_calls -%}",
        "{{- '\\n<tool_call>\\n{\"name\": ' ~ (call.function.name | tojson)"
        " ~ ', \"arguments\": ' ~ (call.function.arguments | tojson) ~ '}\\n</tool_call>' -}}",
        "{%- endfor -%}",
        "{%- endif -%}",
        _literal("<|im_end|>\n"),
        "{%- endif -%}",
        "{%- endfor -%}",
        "{%- if ns.results -%}",
        _literal("<|im_start|>user\n"),
        "{{- ns.results -}}",
        _literal("<|im_end|>\n"),
        "{%- endif -%}",
        "{%- if add_generation_prompt -%}",
        _literal("<|im_start|>assistant\n"),
        "{%- endif -%}",
    ]
)

# What the tokenizer's merges are learnt from: the markup, tool names and JSON of the agent format.
BASE_CORPUS: tuple[str, ...] = (
    '<tool_call>\n{"name": "read_text", "arguments": {"path": "notes.txt"}}\n</tool_call>',
    '<tool_call>\n{"name": "submit_answer", "arguments": {"answer": "42"}}\n</tool_call>',
    "<tool_response>\nThe file holds 3 lines.\n</tool_response>",
    "system user assistant tool tools function name arguments description parameters type object "
    "properties required string integer number boolean array path answer query sheet range page",
    " ".join(ALL_TOOLS),
    "The adjusted APAC growth is 12.5% and the target is not met. The answer is 0 1 2 3 4 5 6 7 8 9.",
    "You may call one or more functions to assist with the user query.",
)


@dataclass(frozen=True)
class TinyLlamaConfig:
    vocab_size: int = 512
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    max_position_embeddings: int = 2048


def build_tiny_model(
    folder: Path,
    *,
    seed: int = 0,
    config: TinyLlamaConfig = TinyLlamaConfig(),
    extra_corpus: Sequence[str] = (),
) -> Path:
    """Write a random Llama and its tokenizer to `folder` (save_pretrained layout); return the folder."""
    import torch
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder = Path(folder)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=config.vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([*BASE_CORPUS, *extra_corpus], trainer=trainer)
    tokenizer.add_tokens([AddedToken(token, special=False, normalized=False) for token in TOOL_MARKUP_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token="<|endoftext|>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)

    llama = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_attention_heads,
        max_position_embeddings=config.max_position_embeddings,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(llama)
    model.generation_config = GenerationConfig(
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id
    )
    model.save_pretrained(folder)
    (folder / "practicum_builtin.json").write_text(
        json.dumps({"seed": seed, "config": asdict(config), "extra_corpus": list(extra_corpus)}, indent=2)
    )
    return folder


def builtin_model(name: str, *, seed: int = 0, cache_dir: Path) -> Path:
    """The folder of a built-in model, built on first use under `cache_dir` and reused after."""
    if name not in BUILTIN_MODELS:
        raise ValueError(f"unknown built-in model {name!r}; known: {', '.join(BUILTIN_MODELS)}")
    folder = Path(cache_dir) / f"{name}-seed{seed}"
    if (folder / "practicum_builtin.json").is_file():
        return folder
    # Built beside and renamed into place, so a concurrent or killed build never leaves half a model.
    staging = Path(cache_dir) / f".{folder.name}.{os.getpid()}"
    build_tiny_model(staging, seed=seed)
    try:
        staging.rename(folder)
    except OSError:
        if not (folder / "practicum_builtin.json").is_file():
            raise
        shutil.rmtree(staging, ignore_errors=True)
    return folder
