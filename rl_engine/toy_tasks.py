"""A built-in toy task set and a tiny word-level model that can learn it on a CPU in minutes.

The tasks are real bundles (task.toml, instruction.md, a world file, a rubric, a golden answer)
run through the real harness. Each asks for the colour word of one object ("What colour is
grass?"); the world holds `answer.txt` with that word, so a capable agent can also read it with
`read_text`. The rubric is one `regex` criterion that the whole answer must be that word.

The tiny model is a random 2-layer Llama whose tokenizer is word-level over the toy vocabulary
(every other word of the prompt is `[UNK]`). That choice is what makes learning from scratch
possible: a one-word answer is one token, so a random model already names a colour word now and
then (reward ≈ 1/V), GRPO has a signal from the first step, and the test needs no warm start.
Use it with `sampling.max_new_tokens_per_turn = 1`: the turn's text is the final answer.
"""

from __future__ import annotations

import json
from pathlib import Path

# Two task sets over one vocabulary. "green": every object is green, so one answer is right for all
# of them. "colours": six objects, six colours, so the answer depends on the prompt (harder; see
# docs/harness.md for how GRPO does on it).
TASK_SETS = {
    "green": {
        "grass": "green",
        "leaf": "green",
        "frog": "green",
        "lime": "green",
        "pea": "green",
        "moss": "green",
    },
    "colours": {
        "grass": "green",
        "sky": "blue",
        "blood": "red",
        "snow": "white",
        "coal": "black",
        "banana": "yellow",
    },
}
OBJECTS = {name: colour for tasks in TASK_SETS.values() for name, colour in tasks.items()}
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "[UNK]"]
# The toy model answers in plain text; its chat template leaves out the tool schemas and the
# system prompt. Measured: with them (≈ 470 and ≈ 100 tokens, nearly all [UNK]) even supervised
# training of this 2-layer model stays at chance for 200 steps; with the 25-token prompt that
# remains it learns the answers in ≈ 50. The template is prefix-stable (sequences.py).
CHAT_TEMPLATE = (
    "{% for message in messages if message.role != 'system' %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
VOCABULARY = [
    "system",
    "user",
    "assistant",
    "What",
    "colour",
    "is",
    "?",
    "Answer",
    "with",
    "one",
    "word",
    ".",
]

TASK_TOML = """\
[task]
name = "toy/colour-of-{object}"
version = "1"
description = "Name the colour of {object} in one word"
authors = [{{ name = "Practicum", email = "toy@practicum.invalid" }}]
keywords = ["toy"]

[metadata]
domain = "toy"
difficulty = "easy"

[agent]
timeout_sec = 60

[environment]
cpus = 1
memory_mb = 512
network_mode = "no-network"

[verifier]
timeout_sec = 30

[practicum]
max_turns = 2
max_tokens = 64
tools = ["read_text", "submit_answer"]
"""


def write_toy_tasks(dest: Path, task_set: str = "green", objects: list[str] | None = None) -> list[Path]:
    """One bundle folder per object of the task set (or of `objects`) under `dest`; returns the folders."""
    if task_set not in TASK_SETS:
        raise ValueError(f"unknown toy task set {task_set!r}; known: {', '.join(TASK_SETS)}")
    folders = []
    for name in objects or list(TASK_SETS[task_set]):
        colour = OBJECTS[name]
        folder = Path(dest) / f"colour-of-{name}"
        (folder / "environment" / "world").mkdir(parents=True, exist_ok=True)
        (folder / "tests").mkdir(exist_ok=True)
        (folder / "solution").mkdir(exist_ok=True)
        (folder / "task.toml").write_text(TASK_TOML.format(object=name))
        (folder / "instruction.md").write_text(f"What colour is {name} ? Answer with one word .\n")
        (folder / "environment" / "world" / "answer.txt").write_text(f"{colour}\n")
        criterion = {
            "id": "c1",
            "text": f"The answer is the word {colour}",
            "kind": "regex",
            "params": {"pattern": rf"^\W*{colour}\W*$"},
            "weight": 1.0,
            "required": True,
        }
        (folder / "tests" / "rubric.json").write_text(json.dumps({"criteria": [criterion]}, indent=2))
        (folder / "solution" / "answer.md").write_text(f"{colour}\n")
        folders.append(folder)
    return folders


def build_toy_model(
    folder: Path, *, seed: int = 0, hidden_size: int = 64, initializer_range: float = 0.1
) -> Path:
    """A random tiny Llama with the toy word-level tokenizer, saved as a local model folder."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = SPECIAL_TOKENS + VOCABULARY + list(OBJECTS) + sorted(set(OBJECTS.values()))
    tokenizer = Tokenizer(
        models.WordLevel({word: index for index, word in enumerate(words)}, unk_token="[UNK]")
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="[UNK]",
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    config = LlamaConfig(
        vocab_size=len(words),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
        initializer_range=initializer_range,
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(folder)
    return Path(folder)
