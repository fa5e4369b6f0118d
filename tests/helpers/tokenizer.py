"""A tiny byte-level BPE tokenizer with a Qwen3-style chat template, built here with the `tokenizers` library (nothing
downloaded), for `--format tokenized` tests: `save_tokenizer` writes it to a folder (tests/conftest.py's
`tokenizer_dir` fixture), `masked_runs` cuts a row's loss mask into its trained assistant turns.

Importing this module skips the importing test module where `transformers` is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
# Qwen3.6-shaped: reasoning rendered only for assistant turns after the last user turn, `<think>\n` in the
# generation prompt when thinking is on.
QWEN3_STYLE = (
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}"
    "{%- endfor -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' -%}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{%- if loop.index0 > ns.last_user and m.reasoning_content is string -%}"
    "{{ '<think>\\n' + m.reasoning_content + '\\n</think>\\n\\n' }}"
    "{%- endif -%}"
    "{{ m.content + '<|im_end|>\\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is not defined or enable_thinking -%}{{ '<think>\\n' }}{%- endif -%}"
    "{%- endif -%}"
)


def save_tokenizer(folder: Path) -> Path:
    """The tokenizer, saved into `folder` (as `save_pretrained` writes it); returns `folder`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=SPECIAL, initial_alphabet=alphabet)
    tok.train_from_iterator(["multi answer reasoning single kept question be brief and then last one"] * 20, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.add_special_tokens({"additional_special_tokens": SPECIAL[1:]})
    fast.chat_template = QWEN3_STYLE
    fast.save_pretrained(str(folder))
    return folder


def masked_runs(ids: list[int], mask: list[int]) -> list[list[int]]:
    """The maximal runs of masked tokens, in order: one per trained assistant turn."""
    runs: list[list[int]] = []
    for i, (token, bit) in enumerate(zip(ids, mask, strict=True)):
        if bit:
            if i == 0 or not mask[i - 1]:
                runs.append([])
            runs[-1].append(token)
    return runs
