"""The tokenized export: each conversation rendered with the model's own chat template, as `input_ids` and a 0/1
`loss_mask` that is 1 exactly on the tokens the model generated.

What "generated" means is read from the template itself: for assistant turn i, the generation prompt is the
template applied to the messages before it with `add_generation_prompt=True`; the turn's tokens start where the
full rendering departs from that prompt (for Qwen3.6 templates, after `<|im_start|>assistant\\n<think>\\n`) and end
with the template's end-of-turn token (found by rendering a probe turn: the first special token after its
content). So the mask covers the reasoning, `</think>`, the answer and the end-of-turn token, and never a role
header, the prompt's `<think>` or the newline a template puts after the end-of-turn token.

The text is tokenized piece by piece (template, turn, template, ...), as a server sees it: the prompt's tokens,
then the completion's. The ids are a re-tokenization of the stored text, not the ids the server produced (the run
stores no token ids); a sampled completion can be tokenized differently by the model than by its tokenizer.

Tool conversations render with the row's `tools` (passed to the template) and each kept turn's `tool_calls` (arguments
parsed to objects, as SpecForge's parser hands them to templates); those turns and the tool results were kept as
given, so the mask is 0 on them: it covers only the turns regen generated.

Templates that render reasoning only after the last user turn (Qwen3.x) show history turns without it: those
turns are masked as rendered (answer and end-of-turn), and the summary counts them (`notes`); `--expand-turns`
gives one row per turn, each with its reasoning. `transformers` loads the tokenizer from a local folder only.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import ConfigError
from ..schema import REJECT_FIELDS
from .shapes import Message, Style, conversation, targets

Row = dict[str, Any]
_PROBE = "regen-probe-answer"


class TokenizedConverter:
    def __init__(
        self,
        tokenizer_dir: Path,
        chat_template: Path | None,
        style: Style,
        *,
        expand_turns: bool = False,
        thinking: bool = True,
    ) -> None:
        self.tokenizer = load_tokenizer(tokenizer_dir, chat_template)
        self.style = Style("field" if style.reasoning == "inline" else style.reasoning)
        self.expand, self.thinking = expand_turns, thinking
        self.end_of_turn = end_of_turn(self.tokenizer, thinking)
        self.encoder = Encoder(self.tokenizer)
        self.skipped: Counter[str] = Counter()
        self.notes: Counter[str] = Counter()
        self._tools: list[Row] | None = None  # the current row's tools, for the template
        self._keep: list[str] = []
        self._rejects = False

    def schema(self, keep_fields: list[str], *, rejects: bool) -> pa.Schema:
        self._keep, self._rejects = keep_fields, rejects
        fields = [pa.field("id", pa.string())]
        if self.expand:
            fields += [pa.field("source_id", pa.string()), pa.field("assistant_turn_index", pa.int32())]
        fields += [
            pa.field("input_ids", pa.list_(pa.int32())),
            pa.field("loss_mask", pa.list_(pa.int8())),
            pa.field("num_tokens", pa.int32()),
            pa.field("num_loss_tokens", pa.int32()),
            pa.field("model", pa.string()),
        ]
        fields += list(REJECT_FIELDS) if rejects else []
        return pa.schema(fields + [pa.field(name, pa.string()) for name in keep_fields])

    def rows(self, batch: list[Row]) -> list[Row]:
        """The batch's rows tokenized: each conversation rendered and cut into pieces (prompt, generated turn, ...,
        tail) in order, then every piece of the batch encoded by the tokenizer in a few calls (`Encoder`), each
        row's `input_ids` and `loss_mask` NumPy views of the batch's arrays (schema.to_table builds their columns
        with one copy)."""
        planned: list[tuple[Row, list[str], list[int], Row]] = []  # (row, pieces, their mask bits, head)
        for row in batch:
            conv = conversation(row)
            self._tools = json.loads(row["tools"]) if row.get("tools") else None
            found = targets(conv)
            if not found:
                self.skipped["no_generated_turn"] += 1
                continue
            if not self.expand:
                positions = [i for i, m in enumerate(conv) if m.generated]
                self._plan(planned, row, conv, positions, {"id": row["id"]})
                continue
            for target in found:
                head = {"id": f"{row['id']}#turn{target.index}", "source_id": row["id"]}
                head["assistant_turn_index"] = target.index
                sample = (*target.history, target.turn)
                self._plan(planned, row, sample, [len(sample) - 1], head)
        pieces = [piece for _, texts, _, _ in planned for piece in texts]
        ids, lengths = self.encoder.encode(pieces)
        mask = np.repeat(np.array([bit for _, _, bits, _ in planned for bit in bits], dtype=np.int8), lengths)
        ends = np.cumsum(lengths)
        out: list[Row] = []
        first = 0  # the row's first piece
        for row, texts, _, head in planned:
            start = int(ends[first - 1]) if first else 0
            end = int(ends[first + len(texts) - 1])
            first += len(texts)
            row_mask = mask[start:end]
            extra = {name: row.get(name) for name in self._keep + (["reason", "detail"] if self._rejects else [])}
            body = {"input_ids": ids[start:end], "loss_mask": row_mask, "num_tokens": end - start}
            body["num_loss_tokens"] = int(np.count_nonzero(row_mask))
            out.append({**head, **body, "model": row.get("model"), **extra})
        return out

    def _plan(
        self, planned: list[tuple[Row, list[str], list[int], Row]], row: Row, conv: tuple[Message, ...],
        positions: list[int], head: Row,
    ) -> None:  # fmt: skip
        """Append the row's pieces to `planned`, or count the reason it cannot be rendered in `skipped`."""
        try:
            texts, bits = self.pieces(conv, positions)
        except _Unrenderable as exc:
            self.skipped[str(exc)] += 1
            return
        planned.append((row, texts, bits, head))

    def pieces(self, conv: tuple[Message, ...], positions: list[int]) -> tuple[list[str], list[int]]:
        """`conv` rendered and cut where the generated turns at `positions` start and end: the pieces of text in
        order and each one's mask bit (1 on a generated turn), tokenized apart as a server sees them."""
        messages = [self._message(m) for m in conv]
        full = self._render(messages, generation_prompt=False)
        spans: list[tuple[int, int]] = []
        for i in positions:
            prompt = self._render(messages[:i], generation_prompt=True)
            start = _common_prefix(prompt, full)
            if spans and start < spans[-1][1]:
                raise _Unrenderable("template_reorders_turns")
            end = full.find(self.end_of_turn, start)
            if end < 0:
                raise _Unrenderable("no_end_of_turn")
            spans.append((start, end + len(self.end_of_turn)))
            reasoning = conv[i].reasoning
            if reasoning and reasoning not in full[start:end]:
                self.notes["reasoning_not_rendered"] += 1
        texts: list[str] = []
        bits: list[int] = []
        cursor = 0
        for start, end in spans:
            texts += [full[cursor:start], full[start:end]]
            bits += [0, 1]
            cursor = end
        return texts + [full[cursor:]], bits + [0]

    def _message(self, m: Message) -> Row:
        out: Row = {"role": m.role, "content": m.content}
        if m.role == "assistant" and m.reasoning is not None and self.style.reasoning == "field":
            out["reasoning_content"] = m.reasoning
        if m.calls:
            out["tool_calls"] = [_with_parsed_arguments(call) for call in m.calls]
        if (m.extras or {}).get("tool_call_id"):
            out["tool_call_id"] = (m.extras or {})["tool_call_id"]
        return out

    def _render(self, messages: list[Row], *, generation_prompt: bool) -> str:
        return render(
            self.tokenizer, messages, generation_prompt=generation_prompt, thinking=self.thinking, tools=self._tools
        )


class _Unrenderable(Exception):
    """A conversation the template cannot render as prompt + generated turns; the message is the skip reason."""


# How much text one call to the backend tokenizer encodes: enough pieces for its threads to share, few enough that
# the encodings it returns (each token's id, string, offsets, masks: ~100 bytes) stay a few tens of MB.
ENCODE_CHARS = 1 << 18


class Encoder:
    """Texts to token ids, each text alone and without special tokens added: what `tokenizer(text,
    add_special_tokens=False)["input_ids"]` returns, for many texts at once.

    A plain fast tokenizer (a `PreTrainedTokenizerFast` whose encoding methods are its own, with no truncation or
    padding set and special tokens matched as transformers matches them) is asked through its backend's
    `encode_batch_fast`: the same ids without the offsets that are not used, the texts shared among the backend's
    threads (600 seed-shaped conversations on the tests' tokenizer: 1.3x the speed of one transformers call per text
    on one thread, 2.4x on two). Any other tokenizer, or one whose ids for a probe differ, is called through
    transformers with the texts as one batch."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.backend = _plain_backend(tokenizer)
        if self.backend is not None:
            probe = "regen probe <|im_end|> 12 345\n\n  tabs\tand émoji 🙂"
            if self._backend_ids([probe, ""]) != [list(self._transformers_ids([probe])[0]), []]:
                self.backend = None

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The ids of every text, one after another (int32), and how many each text has (int64)."""
        lengths = np.zeros(len(texts), dtype=np.int64)
        chunks: list[np.ndarray] = [np.empty(0, dtype=np.int32)]
        at = 0
        while at < len(texts):
            end, size = at, 0
            while end < len(texts) and (end == at or size + len(texts[end]) <= ENCODE_CHARS):
                size += len(texts[end])
                end += 1
            some = [i for i in range(at, end) if texts[i]]  # an empty text has no token: not asked
            if some:
                encoded = self._ids([texts[i] for i in some])
                lengths[some] = [len(ids) for ids in encoded]
                chunks.append(np.fromiter(itertools.chain.from_iterable(encoded), dtype=np.int32))
            at = end
        return np.concatenate(chunks), lengths

    def _ids(self, texts: list[str]) -> list[list[int]]:
        return self._backend_ids(texts) if self.backend is not None else self._transformers_ids(texts)

    def _backend_ids(self, texts: list[str]) -> list[list[int]]:
        assert self.backend is not None
        return [e.ids for e in self.backend.encode_batch_fast(texts, add_special_tokens=False)]

    def _transformers_ids(self, texts: list[str]) -> list[list[int]]:
        return [list(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]


_ENCODING_METHODS = (
    "__call__", "_call_one", "encode", "encode_plus", "batch_encode_plus", "_encode_plus", "_batch_encode_plus",
    "set_truncation_and_padding",
)  # fmt: skip


def _plain_backend(tokenizer: Any) -> Any:
    """The `tokenizers.Tokenizer` behind `tokenizer` when calling it directly gives the ids transformers would
    (see Encoder), else None."""
    from transformers import PreTrainedTokenizerFast

    backend: Any = getattr(tokenizer, "backend_tokenizer", None)
    if not isinstance(tokenizer, PreTrainedTokenizerFast) or not hasattr(backend, "encode_batch_fast"):
        return None
    cls = type(tokenizer)
    if any(getattr(cls, m, None) is not getattr(PreTrainedTokenizerFast, m, None) for m in _ENCODING_METHODS):
        return None  # a subclass that encodes its own way
    if backend.truncation is not None or backend.padding is not None:
        return None
    if bool(getattr(backend, "encode_special_tokens", False)) != bool(
        getattr(tokenizer, "split_special_tokens", False)
    ):
        return None
    return backend


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt")


def load_tokenizer(folder: Path, chat_template: Path | None) -> Any:
    """The folder's tokenizer with its chat template (or `chat_template`'s text). Every argument is checked before
    transformers is asked, so a wrong path reads as one line naming it, not as transformers' own text."""
    template = None
    if chat_template is not None:
        try:
            template = chat_template.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise ConfigError(f"--chat-template {chat_template}: {why}") from None
        if not template.strip():
            raise ConfigError(f"--chat-template {chat_template}: the file is empty")
    if not folder.is_dir():
        raise ConfigError(f"--tokenizer {folder}: not a folder (a local tokenizer folder; nothing is downloaded)")
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ConfigError(
            f"--tokenizer {folder}: no tokenizer in this folder (none of {', '.join(TOKENIZER_FILES)}); "
            "give the model's folder, or a folder saved by tokenizer.save_pretrained"
        )
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ConfigError("--format tokenized needs transformers: pip install transformers") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"--tokenizer {folder}: cannot load a tokenizer: {first}") from None
    if template is not None:
        tokenizer.chat_template = template
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(f"--tokenizer {folder} has no chat template; give one with --chat-template FILE")
    return tokenizer


def render(
    tokenizer: Any, messages: list[Row], *, generation_prompt: bool, thinking: bool, tools: list[Row] | None = None
) -> str:
    text = tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=generation_prompt, enable_thinking=thinking
    )
    return str(text)


def _with_parsed_arguments(call: Row) -> Row:
    """A tool call whose `arguments` JSON string is an object, as chat templates render them (`| tojson`)."""
    function = dict(call.get("function") or {})
    try:
        function["arguments"] = json.loads(function.get("arguments") or "{}")
    except ValueError:
        pass  # not JSON: rendered as the string it is
    return {**call, "function": function}


def end_of_turn(tokenizer: Any, thinking: bool) -> str:
    """The special token that closes an assistant turn in this template: the first one after a probe turn's text."""
    probe = [{"role": "user", "content": "q"}, {"role": "assistant", "content": _PROBE}]
    text = render(tokenizer, probe, generation_prompt=False, thinking=thinking)
    tail = text[text.rfind(_PROBE) + len(_PROBE) :]
    specials = [str(t) for t in getattr(tokenizer, "all_special_tokens", [])]
    specials += [str(t) for t in getattr(tokenizer, "added_tokens_decoder", {}).values() if getattr(t, "special", 0)]
    found = sorted((tail.find(t), t) for t in set(specials) if t and t in tail)
    if not found:
        raise ConfigError("cannot tell the chat template's end-of-turn token: no special token follows a turn")
    return found[0][1]


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # binary search for the first difference
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo
