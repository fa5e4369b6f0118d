"""`regen init DATASET [--endpoint URL]...`: a commented config, written from the dataset's first rows and what the
endpoints report, that runs as written.

The dataset's shape comes from `inputs/sniff.py` (the audit's own rules and the run's own reader on the first
1,000 rows): which field holds the conversation, or OpenAI Batch request lines (`input.format = "openai-batch"`),
the id field, repeated ids, content parts, tools, images, the rows a run would refuse, and how many rows have
assistant turns the audit fails (when some pass and some fail, only the failing ones are selected: the repair job).
A dataset of which no row can be used (empty, unreadable, all images) gets no config: `InputError` (exit 2) with the
reasons. Each endpoint is asked what it serves (a preflight without the probe): the model name and the server
arguments `[expect]` pins. Every line a user must read before a real run ends in `# CHECK: ...` saying what to
check; the shipped configs mark theirs the same way.
"""

from __future__ import annotations

import asyncio
import datetime
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..config import EndpointConfig, config_from_dict
from ..endpoints.fleet import StartSimulator
from ..errors import InputError
from ..inputs.batch_lines import SAMPLING_FIELDS
from ..inputs.sniff import SNIFF_ROWS, Shape, sniff
from ..server.preflight import preflight

MARK = "# CHECK:"
DEFAULT_URL = "http://127.0.0.1:30000"
MAX_TOKENS = 32768  # generation.max_tokens where the server's context leaves room for it
EXPECT_KEYS = ("reasoning_parser", "speculative_algorithm", "tool_call_parser")


@dataclass
class InitResult:
    text: str  # the config file's text
    shape: Shape
    notes: list[str] = field(default_factory=list)  # what the user should know (also in the file's head)


def init_config(
    dataset: str, endpoints: list[str], *, rows: int = SNIFF_ROWS, simulator: StartSimulator | None = None
) -> InitResult:
    """The config for `dataset` against `endpoints` (none: a local server's default URL, marked; `sim` is served by
    `simulator`, as preflight says)."""
    shape = sniff(dataset, rows)
    _refuse_unusable(dataset, shape, rows)
    served = asyncio.run(_served(endpoints, simulator)) if endpoints else {}
    notes = _notes(shape, served, endpoints)
    return InitResult(_render(dataset, shape, endpoints, served, notes), shape, notes)


def _refuse_unusable(dataset: str, shape: Shape, limit: int) -> None:
    """InputError when no row of the first ones could be sent: a config for them would run and send nothing."""
    if not shape.rows:
        raise InputError(f"{dataset}: no rows, so there is nothing to write a config for (no config was written)")
    if shape.readable:
        return
    which = f"the first {shape.rows}" if shape.rows >= limit else f"its {shape.rows}"
    lines = [f"{dataset}: none of {which} rows can be sent, so no config was written:"]
    lines += [f"  {n} row{'s' if n > 1 else ''}: {reason}" for reason, n in shape.unreadable.most_common(3)]
    if shape.fields and not shape.image_rows:
        shown = ", ".join(sorted(shape.fields)[:12])
        lines.append(
            f"the rows' fields are {shown}; regen reads a conversation (messages, ShareGPT conversations), a prompt "
            "column (prompt, instruction, question, input, query) or OpenAI Batch lines (docs/conversations.md)"
        )
    raise InputError("\n".join(lines))


async def _served(urls: list[str], simulator: StartSimulator | None) -> dict[str, Any]:
    """What the first reachable endpoint reports: {model, expect: {key: value}, url}, or {error}."""
    cfg = config_from_dict({"endpoints": [{"url": u} for u in urls]})
    result = await preflight(cfg, urls=urls, probe=False, simulator=simulator)
    for ep in result["endpoints"]:
        info = ep.get("info") or {}
        if ep.get("reachable") and info.get("served_models"):
            expect = {k: info[k] for k in EXPECT_KEYS if info.get(k)}
            context = next((c["actual"] for c in ep["checks"] if c["key"] == "context_length"), None)
            return {"model": info["served_models"][0], "expect": expect, "url": ep["url"], "context": context}
    first = result["endpoints"][0] if result["endpoints"] else {}
    checks = "; ".join(f"{c['name']}: {c['actual']}" for c in first.get("checks", []) if not c.get("ok"))
    return {"error": checks or "no endpoint answered"}


def _notes(shape: Shape, served: dict[str, Any], endpoints: list[str]) -> list[str]:
    notes = []
    if shape.unreadable:
        reason, n = shape.unreadable.most_common(1)[0]
        notes.append(f"{sum(shape.unreadable.values())} of {shape.rows} rows cannot be read ({n}: {reason})")
    if shape.image_rows:
        notes.append(f"{shape.image_rows} rows carry images: regen sends text only, so they are refused (bad_input)")
    if shape.duplicate_ids:
        notes.append(
            f"{shape.duplicate_ids} rows in the first {shape.rows} repeat an earlier row's id: dedupe keeps the "
            "first of each (the repaired export gives every copy its regenerated turns)"
        )
    if served.get("error"):
        notes.append(f"the endpoints did not say what they serve ({served['error']}): model and [expect] are guesses")
    elif served and shape.fields.get("tools") and not served["expect"].get("tool_call_parser"):
        notes.append(
            f"the rows carry tools but {served['url']} parses no tool calls: `regen run` stops before sending "
            "(exit 3); start the server with --tool-call-parser NAME (qwen25 for Qwen2.5/Qwen3, ...), or set "
            "client.allow_no_tool_parser = true to have each call left as text rejected tool_call"
        )
    if not endpoints:
        notes.append(f"no --endpoint given: the endpoint is {DEFAULT_URL}")
    return notes


def _render(dataset: str, shape: Shape, endpoints: list[str], served: dict[str, Any], notes: list[str]) -> str:
    today = datetime.date.today().isoformat()
    head = [
        f"# Written by `regen init` on {today} from the first {shape.rows} rows of {dataset}.",
        f"# Lines ending in `{MARK} ...` are the ones to read before a real run; the rest suit most jobs",
        "# (every key: README.md, Configuration). Try it: regen run THIS_FILE --limit 20",
        f"# Found: {_found(shape)}",
        *(f"# Note: {n}" for n in notes),
    ]
    sections = [_input(dataset, shape), _output(dataset), _generation(shape, served), _endpoints(endpoints)]
    if served.get("expect"):
        sections.append(_expect(served["expect"]))
    return "\n".join(head) + "\n\n" + "\n\n".join(sections) + "\n"


def _found(shape: Shape) -> str:
    where = shape.conversation_field
    conv = f"conversation in `{where}`" if where else f"no conversation field (a plain `{shape.prompt_field}`)"
    if shape.format == "openai-batch":
        conv = "OpenAI Batch request lines (custom_id, method, url, body)"
    roles = ", ".join(f"{r} {n}" for r, n in shape.roles.most_common(6))
    parts = ", ".join(f"{t} {n}" for t, n in shape.part_types.most_common(4))
    bits = [conv, f"roles: {roles}" if roles else "", f"content parts: {parts}" if parts else ""]
    bits.append("a tools column" if shape.fields["tools"] else "")
    bits.append(f"ids in `{shape.id_field}`" if shape.id_field else "no id field (ids: a hash of each conversation)")
    bits.append(f"body fields: {', '.join(sorted(shape.body_fields))}" if shape.body_fields else "")
    failing = ", ".join(f"{r} {n}" for r, n in shape.by_reason.most_common(4))
    if not shape.answered_rows and shape.format != "openai-batch":
        bits.append("no stored assistant turns (prompts only)")
    elif failing:
        bits.append(f"{shape.failing_rows} rows with assistant turns the audit fails ({failing})")
    return "; ".join(b for b in bits if b)


def _line(key: str, value: Any, check: str = "") -> str:
    text = f"{key} = {_toml(value)}"
    return f"{text:<40} {MARK} {check}" if check else text


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return orjson.dumps(value).decode() if isinstance(value, str) else str(value)


def _input(dataset: str, shape: Shape) -> str:
    others = sorted(f for f in shape.fields if f not in {shape.id_field, shape.conversation_field, "tools"})
    lines = ["[input]", _line("path", dataset, 'the whole dataset (a glob for many files: "/data/*.parquet")')]
    if shape.format == "openai-batch":
        lines.append(_line("format", shape.format, "OpenAI Batch lines: custom_id is each row's id"))
        others = sorted({*others, *shape.body_fields} - {"custom_id", "method", "url"})
    else:
        lines += _conversation_keys(shape)
    check = (f"columns copied into output rows; this dataset has {', '.join(others)}" if others else
             "columns copied into output rows") + "; a name the rows lack is null in every row"  # fmt: skip
    lines.append(_line("keep_fields", [], check))
    if shape.duplicate_ids or (not shape.id_field and shape.format != "openai-batch"):
        lines.append(_line("dedupe", True, "a repeated id (an identical conversation) is generated once"))
    unreadable = sum(shape.unreadable.values())
    if unreadable:  # never all of them: init refuses such a dataset
        reason = shape.unreadable.most_common(1)[0][0]
        lines.append(_line("max_bad_share", 1, f"{unreadable} of the first {shape.rows} rows cannot be read ({reason}"
                                               "): they go to rejects as bad_input and the rest are sent"))  # fmt: skip
    if sampling := sorted(k for k in shape.body_fields if k in (*SAMPLING_FIELDS, "n")):
        check = f"the bodies set {', '.join(sampling)}: true uses them (n: that row's samples) over [generation]"
        lines.append(_line("request_overrides", False, check))
    lines += _selection(shape)
    return "\n".join(lines)


def _conversation_keys(shape: Shape) -> list[str]:
    if shape.id_field:
        lines = [_line("id_field", shape.id_field, "each row's id, unique across the dataset")]
    else:
        lines = [_line("id_field", "id", "absent in the rows: each id is a hash of the row's conversation")]
    if shape.conversation_field:
        return [*lines, _line("messages_field", "auto")]
    return [*lines, _line("prompt_field", shape.prompt_field or "prompt", "the column holding each prompt")]


def _selection(shape: Shape) -> list[str]:
    """`select = "invalid"` where it narrows the run: some rows' stored turns fail the audit and some pass. When
    every readable row fails, every row is regenerated (a comment says why), whatever the reasons; a dataset of
    prompts (no row stores an answer) has nothing to select by."""
    failing = ", ".join(f"{r} {n}" for r, n in shape.by_reason.most_common(4))
    if not shape.failing_rows or not shape.answered_rows:  # nothing stored to judge: a prompt dataset
        return []
    if shape.failing_rows < shape.readable:
        count = f"{shape.failing_rows} of {shape.readable}: {failing}"
        check = f'only rows the audit fails ({count}) are sent; "all" = every row'
        return [_line("select", "invalid", check)]
    if set(shape.by_reason) == {"empty_reasoning"}:
        return ["# The rows store no reasoning at all: every row is regenerated (a thinking-mode dataset)."]
    return [f"# Every row's stored turns fail the audit ({failing}): every row is regenerated."]


def _output(dataset: str) -> str:
    stem = Path(dataset.rstrip("/")).name.split(".")[0] or "run"
    return "\n".join(["[output]", _line("dir", f"runs/{stem}", "the RUN_DIR, on a filesystem every worker sees")])


def _generation(shape: Shape, served: dict[str, Any]) -> str:
    model = served.get("model") or "default"
    check = "the served model name" + ("" if served.get("model") else " (--served-model-name of the server)")
    return "\n".join(
        [
            "[generation]",
            _line("model", model, check),
            _line("thinking", True, "thinking mode (chat_template_kwargs.enable_thinking)"),
            _max_tokens(served.get("context")),
        ]
    )


def _max_tokens(context: int | None) -> str:
    """generation.max_tokens: 32,768, or half the served model's context when that is less (the prompt needs the
    rest: a request that does not fit is refused)."""
    check = "the longest completion; a longer one is rejected as truncated"
    if isinstance(context, int) and context // 2 < MAX_TOKENS:
        return _line("max_tokens", context // 2, f"{check}; half the server's context of {context} tokens")
    return _line("max_tokens", MAX_TOKENS, check)


def _endpoints(urls: list[str]) -> str:
    blocks = []
    for url in urls or [DEFAULT_URL]:
        check = 'a server started with --api-key needs it set; "" for a server without a key'
        blocks.append(
            "\n".join(
                [
                    "[[endpoints]]",
                    _line("url", url, "" if urls else "where the SGLang server (or sglang-router) listens"),
                    _line("concurrency", EndpointConfig.concurrency, "requests in flight; 0 follows the server"),
                    _line("api_key_env", "", f"the environment variable holding the key: {check}"),
                ]
            )
        )
    return "\n\n".join(blocks)


def _expect(expect: dict[str, Any]) -> str:
    lines = ["[expect]                                 # as the server reports it today: preflight stops on drift"]
    lines += [_line(k, v, "what every server must run with") for k, v in expect.items()]
    return "\n".join(lines)
