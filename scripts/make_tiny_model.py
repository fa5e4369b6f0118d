"""A tiny random-weight Qwen3 chat model made here, with no hub: what the tests marked real_server serve with vLLM.

    python scripts/make_tiny_model.py OUT_DIR       # run with the real-server venv's python (torch, transformers)

What it makes, in OUT_DIR: a Qwen3 config (hidden 128, 2 layers, a 1,024-token vocabulary), random weights in
safetensors, a byte-level BPE tokenizer trained with `tokenizers` on a few KB of text generated here, and a
Qwen-style chat template (system, user, assistant with reasoning and tool calls, tool results, `enable_thinking`,
tools in the system turn as Qwen3's own template lists them) so that vLLM's `qwen3` reasoning parser and `hermes`
tool parser find their markers (`<think>`, `</think>`, `<tool_call>`, `</tool_call>`) as single tokens.

Why the weights are not left as drawn: a randomly initialised network's logits are nearly equal, so it samples its
1,024 tokens almost uniformly and would end a reply (`<|im_end|>`) or its reasoning (`</think>`) once in a thousand
tokens: every reply would run to `max_tokens`. Here the embedding dominates the residual stream (the next token
depends mostly on the last one), and two of its dimensions carry constants that a few output rows read as a bias:
- the end tokens are likely after ordinary text (at temperature 1 a reply closes its reasoning or ends after some
  tens of tokens, about half of them with an answer) and all but impossible right after a newline or a marker, so no
  reply, and no answer, is empty (a reply starts after `assistant\n`, an answer after `</think>`);
- single-byte tokens are rare, so the text reads as words and numbers rather than broken UTF-8;
- greedy decoding (temperature 0) picks the largest random logit, seldom an end token: it falls into a loop. The
  first seed from SEED whose greedy decoding runs 2,500 tokens without ending and ends periodic is kept (checked
  here with transformers; vLLM's greedy decoding of the saved weights loops the same way: `|> +string`).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

TEXT_SEED = 1234  # the tokenizer's training text
SEED = 1235  # the first weights tried (1234's greedy decoding ends)
VOCAB = 1024
HIDDEN = 128
GATE_DIM, CONST_DIM = 0, 1  # the hidden dimensions that carry constants (see shape_weights)
LEVEL = 4.0
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # skipped when decoding
MARKERS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]  # kept
# Added to a token's logit (in units of the random logits' spread), so that sampling at temperature 1 ends a
# reasoning after ~30 tokens and an answer after ~30 more, and greedy decoding rarely ends at all.
BIASES = {"</think>": 2.4, "<|im_end|>": 2.4}
RANDOM_LOGIT_STD = 2.5

CHAT_TEMPLATE = r"""{%- if tools %}
{{- '<|im_start|>system\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\n\n' }}{%- endif %}
{{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" }}
{{- "You are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
{%- for tool in tools %}{{- "\n" }}{{- tool | tojson }}{%- endfor %}
{{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within " }}
{{- "<tool_call></tool_call> XML tags:\n<tool_call>\n" }}
{{- "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\n' }}
{%- set reasoning = message.reasoning_content or message.reasoning %}
{%- if reasoning is string and reasoning %}{{- '<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' }}{%- endif %}
{{- message.content or '' }}
{%- if message.tool_calls %}
{%- for tool_call in message.tool_calls %}
{%- if tool_call.function %}{%- set tool_call = tool_call.function %}{%- endif %}
{{- '\n<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' }}
{%- if tool_call.arguments is string %}{{- tool_call.arguments }}
{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}
{{- '}\n</tool_call>' }}
{%- endfor %}
{%- endif %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{{- '<|im_start|>user\n<tool_response>\n' + message.content + '\n</tool_response><|im_end|>\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\n' }}
{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}
{%- endif %}"""

WORDS = (
    "the a an of to and in is it that for on with as was be by this are or from at which not have has but they "
    "one two three four five six seven eight nine ten zero number sum answer question think step first then so "
    "because therefore let us check value list table row column file code function return print true false none "
    "city weather time date name price total count add subtract multiply divide equals result final wait maybe "
    "hello world model user assistant system tool call search query data string int float json key"
).split()


def training_text(rng: random.Random) -> str:
    """A few KB of chat-shaped text: words, numbers, punctuation, JSON, code and the chat markers."""
    lines = []
    for _ in range(160):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14)))
        number = rng.randint(0, 10_000)
        kind = rng.randrange(5)
        if kind == 0:
            lines.append(f"<|im_start|>user\n{words.capitalize()}? {number}<|im_end|>")
        elif kind == 1:
            lines.append(f"<|im_start|>assistant\n<think>\n{words}, {number}.\n</think>\n\n{words.capitalize()}.")
        elif kind == 2:
            args = json.dumps({"query": words.split()[0], "n": number})
            lines.append(f'<tool_call>\n{{"name": "{rng.choice(WORDS)}", "arguments": {args}}}\n</tool_call>')
        elif kind == 3:
            lines.append(f"def {rng.choice(WORDS)}(x):\n    return x * {number}  # {words}")
        else:
            lines.append(f"{words.capitalize()}: {number} + {number // 7} = {number + number // 7}.")
    return "\n".join(lines)


def make_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - len(MARKERS),
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    text = training_text(random.Random(TEXT_SEED))
    tokenizer.train_from_iterator([text] * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        clean_up_tokenization_spaces=False,
    )
    fast.add_tokens(MARKERS)  # not special: vLLM's parsers read them in the decoded text
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = 4096
    fast.save_pretrained(out)


def make_model(out: Path) -> None:
    """Random weights, shaped; the first seed whose greedy decoding loops (checked here, with transformers)."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(out)
    ids = tokenizer.convert_tokens_to_ids
    config = Qwen3Config(
        vocab_size=len(tokenizer),  # no token the tokenizer cannot decode
        hidden_size=HIDDEN,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        bos_token_id=ids("<|endoftext|>"),
        eos_token_id=ids("<|im_end|>"),
        pad_token_id=ids("<|endoftext|>"),
        dtype="float32",
    )
    for seed in range(SEED, SEED + 20):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config).eval()
        with torch.no_grad():
            shape_weights(model, tokenizer)
        if greedy_loops(model, tokenizer):
            break
        print(f"seed {seed}: greedy decoding ends; trying the next", file=sys.stderr)
    else:
        sys.exit("no seed of 20 gives a model whose greedy decoding loops")
    model.save_pretrained(out)
    GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id
    ).save_pretrained(out)
    print(f"seed {seed}", file=sys.stderr)


def shape_weights(model, tokenizer) -> None:
    """Give the random network the few habits the tests need (see the module's docstring)."""
    import torch

    embed, head = model.model.embed_tokens.weight, model.lm_head.weight
    hidden = embed.shape[1]
    # The embedding dominates the residual stream (the layers' initial outputs are ~0.05 a dimension): the next
    # token depends mostly on the last one, a little on the context.
    embed.normal_(0.0, 1.0)
    # GATE_DIM carries +LEVEL after an ordinary token and -LEVEL after a newline or a marker: the end tokens read it,
    # so they are likely after ordinary text and all but impossible at the start of a reply, an answer or a line.
    # CONST_DIM carries +LEVEL after every token: single-byte tokens read it negatively, so text reads as words.
    gate = torch.full((embed.shape[0],), LEVEL)
    for token, index in tokenizer.get_vocab().items():
        if "\n" in tokenizer.convert_tokens_to_string([token]) or token in MARKERS or token in SPECIAL:
            gate[index] = -LEVEL
    embed[:, GATE_DIM] = gate
    embed[:, CONST_DIM] = LEVEL
    rms = ((hidden - 2 + 2 * LEVEL**2) / hidden) ** 0.5  # an embedding's, which the final RMSNorm divides by
    head.normal_(0.0, RANDOM_LOGIT_STD * rms / (hidden - 2) ** 0.5)
    head[:, [GATE_DIM, CONST_DIM]] = 0.0
    unit = rms / LEVEL  # a head weight on GATE_DIM or CONST_DIM giving a logit of 1
    for index, token in enumerate(tokenizer.convert_ids_to_tokens(range(head.shape[0]))):
        if len(tokenizer.convert_tokens_to_string([token])) <= 1 and token not in MARKERS + SPECIAL:
            head[index, CONST_DIM] = -2.0 * RANDOM_LOGIT_STD * unit
    for token, bias in BIASES.items():
        head[ids := tokenizer.convert_tokens_to_ids(token)] = 0.0
        head[ids, GATE_DIM] = bias * RANDOM_LOGIT_STD * unit


def greedy_loops(model, tokenizer, tokens: int = 2500) -> bool:
    """Greedy decoding of a chat prompt runs `tokens` without ending and ends in a loop."""
    import torch

    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Write a long story."}], tokenize=False, add_generation_prompt=True
    )
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(
            ids, do_sample=False, max_new_tokens=tokens, eos_token_id=model.config.eos_token_id, pad_token_id=0
        )[0, ids.shape[1] :].tolist()
    if len(out) < tokens or model.config.eos_token_id in out:
        return False
    tail = out[-1000:]
    return any(tail[p:] == tail[:-p] for p in range(1, 400))


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: make_tiny_model.py OUT_DIR")
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    make_tokenizer(out)
    make_model(out)
    print(out)


if __name__ == "__main__":
    main()
