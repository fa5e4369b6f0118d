"""SGLang's wire format: request validation and response/chunk bodies for the OpenAI and native routes.

Everything here is pure (no I/O): the server parses a request into a `GenRequest`, decides how many tokens are
generated, and asks this module for the bytes. Shapes follow shared/SGLANG.md sections 1–3 and 7, per version.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import orjson

from ..sglang.releases import (
    COMPLETION_TOKENS_DETAILS_KEY,
    CONTENT_EMPTY_STRING,
    FORCE_NONEMPTY_CONTENT,
    REASONING_TOKENS_COUNTED,
    REASONING_TOKENS_DETAILS,
    RETURN_META_INFO,
    RETURN_SPEC_TOKENS_DETAILS,
    SERVED_NAME_WITH_COLON,
)
from . import text
from .text import EOS_TOKEN_ID, THINK_END, Plan
from .tool_calls import check_tools, tool_call_text, tool_calls, tool_marker

ALWAYS_FORCE_PARSERS = frozenset({"qwen3-thinking", "minimax", "gpt-oss"})


class ApiError(Exception):
    """An error response: HTTP status, message and the SGLang `type` string."""

    def __init__(self, status: int, message: str, type_: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_

    def body(self) -> dict[str, Any]:
        return {"object": "error", "message": self.message, "type": self.type, "param": None, "code": self.status}

    def stream_body(self) -> dict[str, Any]:
        names = {400: "BAD_REQUEST", 500: "INTERNAL_SERVER_ERROR", 503: "SERVICE_UNAVAILABLE"}
        return {"error": {**self.body(), "type": names.get(self.status, str(self.status))}}


def bad_request(detail: str) -> ApiError:
    """A pydantic/FastAPI validation error, remapped from 422 to 400 (type "Bad Request")."""
    errors = [detail]
    return ApiError(400, f"1 validation error:\n  {detail}\n {errors}", "Bad Request")


QUEUE_FULL = "The request queue is full."
META_INFO_STREAMED = (
    "return_meta_info is not supported with streaming. Please set stream=false when using return_meta_info=true."
)


@dataclass(slots=True)
class GenRequest:
    """One generation request, whatever the route."""

    route: str  # "chat" | "completions" | "generate"
    messages: Any  # chat messages, or the prompt / text
    model: str
    max_new_tokens: int | None  # None: until EOS or the context limit
    stream: bool
    sampling_key: tuple[Any, ...]
    rid: str | None
    prompt_tokens: int
    include_usage: bool = False
    continuous_usage: bool = False
    thinking: bool = False  # the model thinks (chat_template_kwargs.enable_thinking, default on for chat)
    force_reasoning: bool = False  # the qwen3 parser starts inside reasoning
    separate_reasoning: bool = False
    stream_reasoning: bool = False
    force_nonempty_content: bool = False
    return_meta_info: bool = False
    return_spec_details: bool = False
    tools: tuple[str, ...] = ()  # the names of the request's tools
    tool_marker: str | None = None  # TOOL_CALL_ALWAYS / TOOL_CALL_ONCE in the last user message, or None
    tool_call: str | None = None  # the tool this generation calls (decided per attempt: generation.py)
    tool_parser: bool = False  # the server parses tool calls (--tool-call-parser); else they stay in the text


def _number(body: dict[str, Any], key: str, default: float | None = None) -> float | None:
    value = body.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad_request(f"{key}: Input should be a valid number")
    return float(value)


def _int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"{key}: Input should be a valid integer")
    return value


_SAMPLING_KEYS = frozenset(
    {
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "repetition_penalty",
        "presence_penalty",
        "json_schema",
        "regex",
        "ebnf",
        "structural_tag",
        "seed",
        "sampling_seed",
    }
)
_NO_SAMPLING: tuple[Any, ...] = (None, None, None, None, None)
# Chat fields that change the output's shape; a body with none of them (the common case) skips their parsing.
_CHAT_SHAPE_KEYS = frozenset(
    {
        "chat_template_kwargs",
        "reasoning_effort",
        "reasoning",
        "separate_reasoning",
        "stream_reasoning",
        "return_meta_info",
        "return_spec_tokens_details",
    }
)


def check_sampling(body: dict[str, Any]) -> tuple[Any, ...]:
    """SGLang's sampling-parameter ValueErrors (400 BadRequest); returns the part of the params that shapes output."""
    if body.keys().isdisjoint(_SAMPLING_KEYS):
        return _NO_SAMPLING
    temperature = _number(body, "temperature")
    top_p = _number(body, "top_p")
    top_k = _number(body, "top_k")
    min_p = _number(body, "min_p")
    rep = _number(body, "repetition_penalty")
    presence = _number(body, "presence_penalty")
    if top_p is not None and not 0 < top_p <= 1:
        raise ApiError(400, f"top_p must be in (0, 1], got {top_p}.", "BadRequest")
    if top_k is not None and top_k != -1 and top_k < 1:
        raise ApiError(400, f"top_k must be -1 (disable) or at least 1, got {int(top_k)}.", "BadRequest")
    if min_p is not None and not 0 <= min_p <= 1:
        raise ApiError(400, f"min_p must be in [0, 1], got {min_p}.", "BadRequest")
    if rep is not None and not 0 < rep <= 2:
        raise ApiError(400, f"repetition_penalty must be in (0, 2] (1.0 = no penalty), got {rep}.", "BadRequest")
    if presence is not None and not -2 <= presence <= 2:
        raise ApiError(400, f"presence_penalty must be in [-2, 2], got {presence}.", "BadRequest")
    if sum(1 for k in ("json_schema", "regex", "ebnf", "structural_tag") if body.get(k) is not None) > 1:
        raise ApiError(400, "Only one of json_schema, regex, ebnf, or structural_tag can be set.", "BadRequest")
    seed = body.get("seed", body.get("sampling_seed"))
    return (seed, temperature, top_p, top_k, min_p)


def check_context(prompt_tokens: int, max_new: int | None, context: int) -> int:
    """The context-length 400s; returns max_new_tokens after SGLang's silent cap."""
    if prompt_tokens >= context:
        raise ApiError(
            400,
            f"The input ({prompt_tokens} tokens) is longer than the model's context length ({context} tokens).",
            "BadRequest",
        )
    if max_new is not None and prompt_tokens + max_new > context:
        raise ApiError(
            400,
            f"Requested token count exceeds the model's maximum context length of {context} tokens. You requested "
            f"a total of {prompt_tokens + max_new} tokens: {prompt_tokens} tokens from the input messages and "
            f"{max_new} tokens for the completion. Please reduce the number of tokens in the input messages or "
            "the completion to fit within the limit.",
            "BadRequest",
        )
    room = context - prompt_tokens - 1
    return room if max_new is None else min(max_new, room)


def _check_model(model: str, served: str, version: tuple[int, ...]) -> None:
    if ":" not in model or model.startswith(served + ":") or (version >= SERVED_NAME_WITH_COLON and model == served):
        return
    adapter = model.split(":", 1)[1]
    raise ApiError(
        400,
        f"LoRA adapter '{adapter}' was requested, but LoRA is not enabled. Please launch the server with "
        "--enable-lora flag and preload adapters with --lora-paths or /load_lora_adapter endpoint.",
        "BadRequest",
    )


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list):
        raise bad_request("messages: Input should be a valid list")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise bad_request(f"messages.{i}: Input should be a valid dictionary with a 'role'")


def parse_chat(body: dict[str, Any], served: str, context: int, parser: str | None, v: tuple[int, ...]) -> GenRequest:
    messages = body.get("messages")
    _check_messages(messages)
    if not messages:
        raise ApiError(400, "Messages cannot be empty.")
    max_completion = _int(body, "max_completion_tokens")
    max_tokens = _int(body, "max_tokens")
    max_new = max_completion or max_tokens  # 0 is falsy: treated as unset, like SGLang
    if max_new is not None and max_new < 0:
        raise ApiError(400, f"max_new_tokens must be at least 0, got {max_new}.", "BadRequest")
    if max_new is not None and max_new > context:
        raise ApiError(
            400,
            f"max_completion_tokens is too large: {max_new}.This model supports at most {context} completion tokens.",
        )
    model = str(body.get("model") or "default")
    _check_model(model, served, v)
    sampling = check_sampling(body)
    try:
        tools = check_tools(body.get("tools"))
    except ValueError as exc:
        raise bad_request(str(exc)) from None
    stream_options = body.get("stream_options") or {}
    prompt_tokens = text.count_prompt_tokens(messages)
    plain = body.keys().isdisjoint(_CHAT_SHAPE_KEYS)
    if not plain and body.get("stream") and body.get("return_meta_info") and v >= RETURN_META_INFO:
        raise ApiError(400, META_INFO_STREAMED, "BadRequest")  # serving_chat.py `_convert_to_internal_request`
    enable_thinking = None if plain else _enable_thinking(body)
    kwargs = {} if plain else body.get("chat_template_kwargs") or {}
    return GenRequest(
        route="chat",
        messages=messages,
        model=model,
        max_new_tokens=check_context(prompt_tokens, max_new, context),
        stream=bool(body.get("stream")),
        include_usage=bool(stream_options.get("include_usage")),
        continuous_usage=bool(stream_options.get("continuous_usage_stats")),
        sampling_key=sampling,
        rid=_rid(body),
        thinking=enable_thinking is not False,
        force_reasoning=parser is not None and (parser in ALWAYS_FORCE_PARSERS or enable_thinking is not False),
        separate_reasoning=parser is not None and (plain or body.get("separate_reasoning", True) is not False),
        stream_reasoning=plain or body.get("stream_reasoning", True) is not False,
        force_nonempty_content=not plain and bool(kwargs.get("force_nonempty_content")) and v >= FORCE_NONEMPTY_CONTENT,
        return_meta_info=not plain and bool(body.get("return_meta_info")) and v >= RETURN_META_INFO,
        return_spec_details=not plain
        and bool(body.get("return_spec_tokens_details"))
        and v >= RETURN_SPEC_TOKENS_DETAILS,
        prompt_tokens=prompt_tokens,
        tools=tools,
        tool_marker=tool_marker(messages),
    )


def _enable_thinking(body: dict[str, Any]) -> Any:
    """`chat_template_kwargs.enable_thinking`, filled in from `reasoning_effort` / `reasoning.enabled` (setdefault)."""
    kwargs = dict(body.get("chat_template_kwargs") or {})
    effort, reasoning = body.get("reasoning_effort"), body.get("reasoning")
    if effort is not None:
        kwargs.setdefault("enable_thinking", effort != "none")
    if isinstance(reasoning, dict) and reasoning.get("enabled") is not None:
        kwargs.setdefault("enable_thinking", bool(reasoning["enabled"]))
    return kwargs.get("enable_thinking")


def _rid(body: dict[str, Any]) -> str | None:
    rid = body.get("rid")
    if isinstance(rid, list):
        rid = rid[0] if rid else None
    return None if rid is None else str(rid)


def parse_completion(body: dict[str, Any], context: int) -> GenRequest:
    prompt = body.get("prompt")
    if prompt is None or prompt == "" or prompt == []:
        raise ApiError(400, "Prompt cannot be empty")
    max_tokens = body.get("max_tokens", 16)
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens <= 0):
        raise bad_request("max_tokens must be positive")
    prompt_tokens = len(prompt) if isinstance(prompt, list) and prompt and isinstance(prompt[0], int) else 0
    prompt_tokens = prompt_tokens or text.count_prompt_tokens(prompt if isinstance(prompt, str) else str(prompt))
    stream_options = body.get("stream_options") or {}
    return GenRequest(
        route="completions",
        messages={"prompt": prompt},
        model=str(body.get("model") or "default"),
        max_new_tokens=check_context(prompt_tokens, max_tokens, context),
        stream=bool(body.get("stream")),
        include_usage=bool(stream_options.get("include_usage")),
        sampling_key=check_sampling(body),
        rid=_rid(body),
        prompt_tokens=prompt_tokens,
    )


def parse_generate(body: dict[str, Any], context: int) -> GenRequest:
    prompt = body.get("text", body.get("input_ids"))
    if prompt is None:
        raise ApiError(400, "Either text, input_ids or input_embeds should be provided.")
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise ApiError(400, "sampling_params must be a dict")
    max_new = params.get("max_new_tokens", 128)
    if max_new is not None and (not isinstance(max_new, int) or max_new < 0):
        raise ApiError(400, f"max_new_tokens must be at least 0, got {max_new}.")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
        prompt_tokens = len(prompt)
    else:
        prompt_tokens = text.count_prompt_tokens(str(prompt))
    return GenRequest(
        route="generate",
        messages={"text": prompt},
        model="default",
        max_new_tokens=check_context(prompt_tokens, max_new, context),
        stream=bool(body.get("stream")),
        sampling_key=check_sampling(params),
        rid=_rid(body),
        prompt_tokens=prompt_tokens,
    )


# -- outputs ----------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Outcome:
    """What was generated: the plan, how many tokens, and why it stopped."""

    plan: Plan
    tokens: int
    finish: str  # stop | length | abort

    @property
    def matched_stop(self) -> int | None:
        return EOS_TOKEN_ID if self.finish == "stop" else None


def split(req: GenRequest, plan: Plan, tokens: int) -> tuple[str | None, str]:
    """(reasoning_content, content) for the first `tokens` tokens, under the request's parser semantics."""
    reasoning, content, closed = text.raw_prefix(plan, tokens)
    if not req.separate_reasoning:
        return None, reasoning + (THINK_END if closed else "") + content
    if not plan.thinking and req.force_reasoning:
        reasoning, content = content, ""  # force mode with no </think>: everything is "truncated reasoning"
    return (reasoning or None), content


def reasoning_tokens(req: GenRequest, outcome: Outcome, v: tuple[int, ...]) -> int:
    if v < REASONING_TOKENS_COUNTED or not req.separate_reasoning or not req.force_reasoning:
        return 0
    plan = outcome.plan
    through_end = plan.reasoning_tokens + (plan.content_tokens if plan.answer_in_reasoning else 1)
    return min(outcome.tokens, through_end) if plan.thinking else outcome.tokens


def usage(req: GenRequest, outcome: Outcome, v: tuple[int, ...], cached: int | None) -> dict[str, Any]:
    rt = reasoning_tokens(req, outcome, v)
    body: dict[str, Any] = {
        "prompt_tokens": req.prompt_tokens,
        "total_tokens": req.prompt_tokens + outcome.tokens,
        "completion_tokens": outcome.tokens,
        "prompt_tokens_details": None if cached is None else {"cached_tokens": cached},
        "reasoning_tokens": rt,
    }
    if v >= COMPLETION_TOKENS_DETAILS_KEY:
        body["completion_tokens_details"] = (
            {"reasoning_tokens": rt} if rt > 0 and v >= REASONING_TOKENS_DETAILS else None
        )
    return body


_UUID4_CLEAR = ~((0xF << 76) | (0x3 << 62))
_UUID4_SET = (0x4 << 76) | (0x2 << 62)
_ids = random.Random()  # seeded from os.urandom; ids need uniqueness, not secrecy


def random_id() -> str:
    """A uuid4 hex (version and variant bits set), like SGLang's rid, at a fraction of `uuid.uuid4().hex`."""
    return f"{_ids.getrandbits(128) & _UUID4_CLEAR | _UUID4_SET:032x}"


def new_id(req: GenRequest) -> str:
    return req.rid if req.rid is not None else random_id()


def chat_message(req: GenRequest, outcome: Outcome, v: tuple[int, ...]) -> dict[str, Any]:
    reasoning, content = split(req, outcome.plan, outcome.tokens)
    if req.force_nonempty_content and not content and reasoning:
        content, reasoning = reasoning, None
    if v < CONTENT_EMPTY_STRING and req.separate_reasoning and (req.force_reasoning or outcome.plan.thinking):
        content = content.strip()  # up to 0.5.12 the parser strips the text it splits (`detect_and_parse`)
    shown: str | None = content
    if not content and v < CONTENT_EMPTY_STRING:
        shown = None  # up to 0.5.12 an empty content is null (`serving_chat.py`: `text if text else None`)
    return {"role": "assistant", "content": shown, "reasoning_content": reasoning}


def chat_response(
    req: GenRequest, outcome: Outcome, rid: str, created: int, v: tuple[int, ...], extras: dict[str, Any]
) -> bytes:
    choice: dict[str, Any] = {
        "index": 0,
        "message": chat_message(req, outcome, v),
        "logprobs": None,
        "finish_reason": outcome.finish,
        "matched_stop": outcome.matched_stop,
    }
    if req.tool_call is not None and outcome.finish == "stop":  # the answer is a call
        if req.tool_parser:  # SGLang's _process_tool_calls: the call parsed out, finish_reason tool_calls
            choice["message"].update(content="" if v >= CONTENT_EMPTY_STRING else None, tool_calls=tool_calls(req, rid))
            choice.update(finish_reason="tool_calls", matched_stop=None)
        else:
            choice["message"]["content"] = tool_call_text(req)
    if req.return_meta_info:
        choice["meta_info"] = extras.get("meta_info")
    body: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": req.model,
        "choices": [choice],
        "usage": extras["usage"],
        "metadata": {"weight_version": "default"},
    }
    if req.return_spec_details and extras.get("spec") is not None:
        body["sglext"] = {"spec_tokens_details": spec_tokens_details(extras["spec"])}
    return orjson.dumps(body)


def spec_tokens_details(meta: dict[str, Any]) -> dict[str, Any]:
    """`sglext.spec_tokens_details` from a request's meta_info spec keys: protocol.py's `SpecTokensDetails`, every
    field present, as utils.py `spec_tokens_details_from_meta_info` fills it (a missing or null key: 0 or [])."""
    floats = ("spec_accept_rate", "spec_accept_length", "spec_cap_length", "spec_block_accept_length")
    ints = ("spec_num_correct_drafts", "spec_num_proposed_drafts", "spec_verify_ct")
    lists = ("spec_correct_drafts_histogram", "spec_cap_lens_histogram")
    return (
        {k: float(meta.get(k) or 0.0) for k in floats}
        | {k: int(meta.get(k) or 0) for k in ints}
        | {k: list(meta.get(k) or []) for k in lists}
    )


def completion_response(req: GenRequest, outcome: Outcome, rid: str, created: int, usage_: dict[str, Any]) -> bytes:
    _, content = split(req, outcome.plan, outcome.tokens)
    choice = {
        "index": 0,
        "text": content,
        "logprobs": None,
        "finish_reason": outcome.finish,
        "matched_stop": outcome.matched_stop,
    }
    body = {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": req.model,
        "choices": [choice],
        "usage": usage_,
        "metadata": {"weight_version": "default"},
    }
    return orjson.dumps(body)


def finish_object(outcome: Outcome) -> dict[str, Any] | None:
    if outcome.finish == "stop":
        return {"type": "stop", "matched": EOS_TOKEN_ID}
    if outcome.finish == "length":
        return {"type": "length", "length": outcome.tokens}
    return {"type": "abort", "message": "Abort before prefill" if outcome.tokens == 0 else "Abort in waiting queue"}


def output_ids(seed: int, tokens: int) -> list[int]:
    return [(seed + 7919 * i) % 150000 for i in range(tokens)]


# -- SSE ----------------------------------------------------------------------------------------------------------


def sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


DONE = b"data: [DONE]\n\n"


def pieces(text_: str, sent: int, chars: int, complete: bool) -> list[str]:
    """The deltas that send `text_` past its first `sent` characters: all of it in one, or with `chars` > 0 pieces of
    `chars` characters, a shorter tail held back until the text is `complete`."""
    new = text_[sent:]
    if chars <= 0:
        return [new] if new else []
    end = len(new) if complete else len(new) - len(new) % chars
    return [new[i : i + chars] for i in range(0, end, chars)]


class ChatChunks:
    """Builds the chat SSE events in 0.5.23 order (role, reasoning, content, finish, usage) or the 0.5.9 shape.
    With `chunk_chars` every delta carries that many characters (the last of the reasoning and of the content
    fewer)."""

    def __init__(self, req: GenRequest, rid: str, created: int, old_shape: bool, chunk_chars: int = 0) -> None:
        self.req, self.rid, self.created, self.old = req, rid, created, old_shape
        self.chunk_chars = chunk_chars
        self.sent_reasoning = 0  # characters sent
        self.sent_content = 0

    def _chunk(self, delta: dict[str, Any], finish: str | None = None, matched: Any = None) -> dict[str, Any]:
        if self.old:
            delta = {"role": None, "content": None, "reasoning_content": None, "tool_calls": None, **delta}
        chunk: dict[str, Any] = {
            "id": self.rid,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.req.model,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "matched_stop": matched}
            ],
        }
        if self.old:
            chunk["usage"] = None
        return chunk

    def role(self) -> bytes:
        return sse(self._chunk({"role": "assistant", "content": "", "reasoning_content": None}))

    def deltas(self, plan: Plan, tokens: int, final: bool) -> bytes:
        """Events for everything generated up to `tokens` not yet sent (reasoning held back if not streamed)."""
        reasoning, content = split(self.req, plan, tokens)
        reasoning = reasoning or ""
        out: list[bytes] = []
        hold = not self.req.stream_reasoning and not content and not final
        if len(reasoning) > self.sent_reasoning and not hold:
            for piece in pieces(reasoning, self.sent_reasoning, self.chunk_chars, final or bool(content)):
                out.append(sse(self._chunk({"reasoning_content": piece})))
                self.sent_reasoning += len(piece)
        if self.req.tool_call is not None:
            content = ""  # a call is sent whole at the finish (tool_calls, or its text without a parser)
        if len(content) > self.sent_content:
            for piece in pieces(content, self.sent_content, self.chunk_chars, final):
                out.append(sse(self._chunk({"reasoning_content": None, "content": piece})))
                self.sent_content += len(piece)
        return b"".join(out)

    def finish(self, outcome: Outcome) -> bytes:
        if self.req.tool_call is not None and outcome.finish == "stop":
            if not self.req.tool_parser:
                call = sse(self._chunk({"reasoning_content": None, "content": tool_call_text(self.req)}))
                return call + sse(self._chunk({"reasoning_content": None}, outcome.finish, outcome.matched_stop))
            call = sse(self._chunk({"reasoning_content": None, "tool_calls": tool_calls(self.req, self.rid)}))
            return call + sse(self._chunk({"reasoning_content": None}, "tool_calls", None))
        return sse(self._chunk({"reasoning_content": None}, outcome.finish, outcome.matched_stop))

    def usage(self, usage_: dict[str, Any]) -> bytes:
        body = {"id": self.rid, "object": "chat.completion.chunk", "created": self.created, "model": self.req.model}
        return sse({**body, "choices": [], "usage": usage_})

    def sglext(self, spec: dict[str, Any]) -> bytes:
        """The chunk after the finish, before the usage chunk, that `return_spec_tokens_details` adds (>= 0.5.19,
        serving_chat.py `_generate_chat_stream`): a pydantic `ChatCompletionStreamResponse`, so `usage` is null."""
        body = {"id": self.rid, "object": "chat.completion.chunk", "created": self.created, "model": self.req.model}
        return sse({**body, "choices": [], "usage": None, "sglext": {"spec_tokens_details": spec_tokens_details(spec)}})
