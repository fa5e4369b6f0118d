"""Scripted replies (`--replies FILE`): given prompts answered with given texts, byte for byte.

Each line of the JSONL file scripts one prompt:

    {"prompt": "...", "reasoning": "..." | null, "content": "...", "finish_reason": "stop" | "length", "loops": true}

A chat request whose last user message has exactly `prompt` as its (string) content is answered with that reply
instead of generated text; everything else about the request (faults, timing, abort, max_tokens, the reasoning
parser's split) goes on as for any other. `reasoning` (default null, an empty think block) and `finish_reason`
(default "stop"; "length": the text is what came out before max_tokens, so the reply ends there without EOS) are
optional, and so is `loops` (default: whether `finish_reason` is "length"), which makes `/_sim/stats` count the
reply under `looping` as it counts the loop fault.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from ..sglang.resolution import StartupRefused
from .text import Script

_KEYS = ("prompt", "reasoning", "content", "finish_reason", "loops")


def load_replies(path: str | Path) -> dict[str, Script]:
    """The scripted replies of a JSONL file by prompt. A missing file, a bad line, an unknown key or a prompt given
    twice refuses the start (SimStartupError, argparse kind: exit 2), naming the file and line."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise StartupRefused(f"argument --replies: can't open '{path}': {exc.strerror}", "argparse") from None
    replies: dict[str, Script] = {}
    where: dict[str, int] = {}
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            prompt, script = parse_reply(orjson.loads(line))
        except (orjson.JSONDecodeError, ValueError) as exc:
            raise StartupRefused(f"argument --replies: {path}, line {n}: {exc}", "argparse") from None
        if prompt in replies:
            message = f"argument --replies: {path}, line {n}: prompt already scripted on line {where[prompt]}"
            raise StartupRefused(message, "argparse")
        replies[prompt], where[prompt] = script, n
    return replies


def parse_reply(obj: Any) -> tuple[str, Script]:
    """One line's (prompt, script); ValueError says what is wrong with it."""
    if not isinstance(obj, dict):
        raise ValueError("a reply is a JSON object")
    unknown = sorted(set(obj) - set(_KEYS))
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (a reply has {', '.join(_KEYS)})")
    prompt, content = obj.get("prompt"), obj.get("content")
    reasoning, finish = obj.get("reasoning"), obj.get("finish_reason", "stop")
    if not isinstance(prompt, str) or not isinstance(content, str):
        raise ValueError("'prompt' and 'content' must be strings")
    if reasoning is not None and not isinstance(reasoning, str):
        raise ValueError("'reasoning' must be a string or null")
    if finish not in ("stop", "length"):
        raise ValueError(f'\'finish_reason\' must be "stop" or "length", got {finish!r}')
    loops = obj.get("loops", finish == "length")
    if not isinstance(loops, bool):
        raise ValueError("'loops' must be true or false")
    return prompt, Script(reasoning or "", content, ends=finish == "stop", loops=loops)


def scripted(replies: Mapping[str, Script], messages: Any) -> Script | None:
    """The script for a chat request: the one whose prompt is its last user message's content, if any."""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            return replies.get(content) if isinstance(content, str) else None
    return None
