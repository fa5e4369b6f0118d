"""SGLang releases: a version parsed once, and the release in which each behaviour regen relies on changed.

`Release` is a (major, minor, patch) tuple, so it orders like one: `release >= MAMBA_FLAG_RENAMED`. Every version
comparison in regen names the change it is about with one of the thresholds below, grouped by the release that
brought it, each with the SGLang source that shows it (shared/SGLANG.md cites the same files). A message that names
the releases a rule holds for writes them with `span` ("≤0.5.12", "0.5.10-0.5.12", "≥0.5.14") from the same
thresholds, so no release is typed as text elsewhere. A new SGLang release adds its changes here, a row to
`EMULATED` if the simulator should play it, and its flags to flags.py.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_VERSION = re.compile(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?")


class Release(NamedTuple):
    """An SGLang release, as much of its version as any rule depends on: '0.5.10.post1' is Release(0, 5, 10)."""

    major: int
    minor: int
    patch: int

    @classmethod
    def parse(cls, version: str | None) -> Release | None:
        """'0.5.10.post1', 'v0.5.23', '0.5' → a Release; None, '' or text that is no version → None."""
        if not version:
            return None
        found = _VERSION.match(str(version))
        if not found:
            return None
        major, minor, patch = found.groups()
        return cls(int(major), int(minor), int(patch or 0))

    @classmethod
    def of(cls, version: str | None, default: Release | None = None) -> Release:
        """The release `version` names, or `default` (the newest emulated release) when it names none."""
        parsed = cls.parse(version)
        if parsed is not None:
            return parsed
        return NEWEST if default is None else default

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


# The releases regen has read the source of, and the simulator emulates (`regen sim --sim-version`): the version it
# accepts → the version string that release reports in /server_info. 0.5.15 behaves as 0.5.14 (flags.py).
EMULATED: dict[str, str] = {
    "0.5.9": "0.5.9",
    "0.5.10": "0.5.10.post1",
    "0.5.12": "0.5.12",
    "0.5.14": "0.5.14",
    "0.5.15": "0.5.15",
    "0.5.19": "0.5.19",
    "0.5.23": "0.5.23",
}
OLDEST = Release(0, 5, 9)
NEWEST = Release(0, 5, 23)  # what a server that reports no version is taken to be


KNOWN = tuple(sorted(Release.of(v) for v in EMULATED))  # oldest first


def reported_version(version: str) -> str:
    """The version string an emulated release reports ('0.5.10' → '0.5.10.post1')."""
    return EMULATED.get(version, version)


def span(first: Release | None = None, until: Release | None = None) -> str:
    """The releases regen knows from `first` (None: the oldest) up to, not including, `until` (None: every one
    since), as a message writes them: one release '0.5.9', from the oldest '≤0.5.12', open-ended '≥0.5.14', else
    '0.5.10-0.5.12'."""
    known = [r for r in KNOWN if (first is None or r >= first) and (until is None or r < until)]
    if not known:
        raise ValueError(f"no release regen knows from {first} until {until}")
    low, high = known[0], known[-1]
    if low == high:
        return str(low)
    if until is None:
        return f"≥{low}"
    if low == OLDEST:
        return f"≤{high}"
    return f"{low}-{high}"


# ---------------------------------------------------------------- the changes, by the release that brought them
# Each name is the first release with the behaviour: `release >= NAME` means "has it", `release < NAME` "has not".

# 0.5.10 (0.5.10.post1)
REASONING_TOKENS_COUNTED = Release(0, 5, 10)  # usage.reasoning_tokens populated; 0.5.9: always 0 (schedule_batch.py)
COMPLETION_TOKENS_DETAILS_KEY = Release(0, 5, 10)  # usage.completion_tokens_details present (null until >0.5.19)
STREAM_ABORT_ERROR_CHUNK = Release(0, 5, 10)  # a stream abort with a status: an SSE error chunk (serving_chat.py)
STREAM_VALIDATION_AS_STATUS = Release(0, 5, 10)  # a bad stream request gets its 400; 0.5.9: 200 + an error event
STREAM_CHUNKS_MSGSPEC = Release(0, 5, 10)  # before: pydantic chunks with "usage": null on each (the 0.5.9 shape)
NUM_RETRACTIONS_KEY = Release(0, 5, 10)  # meta_info num_retractions; 0.5.9: total_retractions
SPEC_ACCEPT_KEYS_RENAMED = Release(0, 5, 10)  # meta_info spec_accept_* keys as today; 0.5.9 spells them otherwise
MODEL_INFO_FULL = Release(0, 5, 10)  # /model_info with served_model_name, load_format, parsers, ...
MAMBA_SLOTS_BY_OVERLAP = Release(0, 5, 10)  # extra_buffer's tracking slots follow the overlap scheduler, not spec
EXTRA_BUFFER_REFUSES_RADIX_OFF = Release(0, 5, 10)  # extra_buffer + --disable-radix-cache: ValueError (to 0.5.12)
NO_BUFFER_SPEC_REFUSED = Release(0, 5, 10)  # no_buffer + spec + radix cache: ValueError; 0.5.9 turns radix off

# 0.5.12
SPEC_V2_DEFAULT_ON = Release(0, 5, 12)  # SGLANG_ENABLE_SPEC_V2 defaults to true (0.5.9, 0.5.10: false)
SPEC_ALGORITHM_FREE_TEXT = Release(0, 5, 12)  # --speculative-algorithm is looked up at start, not an argparse choice
NO_BUFFER_FORCES_PAGE_SIZE_1 = Release(0, 5, 12)  # no_buffer with radix cache silently sets page_size=1
PD_DECODE_DROPS_EXTRA_BUFFER = Release(0, 5, 12)  # a PD decode server falls back to no_buffer, radix cache off

# 0.5.14
MAMBA_FLAG_RENAMED = Release(0, 5, 14)  # --mamba-radix-cache-strategy; the old name an alias (a deprecation warning)
MAMBA_HOOK = Release(0, 5, 14)  # arg_groups/mamba_hook.py replaces `_handle_mamba_radix_cache`: the rules below
AUTO_PICKS_EXTRA_BUFFER = Release(0, 5, 14)  # auto is extra_buffer where it can be; before: always no_buffer
NO_BUFFER_NEEDS_OVERLAP_OFF = Release(0, 5, 14)  # an explicit no_buffer with the overlap schedule on: AssertionError
SPEC_V2_ENV_REMOVED = Release(0, 5, 14)  # SGLANG_ENABLE_SPEC_V2 only logs that it was removed
EXTRA_BUFFER_LAZY = Release(0, 5, 14)  # the extra_buffer_lazy strategy exists
EXTRA_BUFFER_INERT_WITHOUT_RADIX = Release(0, 5, 14)  # explicit extra_buffer + --disable-radix-cache: inert, no error
THINK_TAG_ONLY_AT_START = Release(0, 5, 14)  # the qwen3 parser strips <think> only at the start (before: every one)
TOOL_CALL_CLOSES_REASONING = Release(0, 5, 14)  # <tool_call> closes unclosed reasoning (qwen3 parser)
CONTENT_EMPTY_STRING = Release(0, 5, 14)  # an empty content is "" and is not stripped (before: null, stripped)
RETURN_META_INFO = Release(0, 5, 14)  # chat requests accept return_meta_info (plain only: see spec_details_field)
LINEAR_ATTN_BACKEND_KEY = Release(0, 5, 14)  # /server_info linear_attn_backend and kv_events

# 0.5.19
USES_MAMBA_RADIX_CACHE_KEY = Release(0, 5, 19)  # a ServerArgs field (0.5.14 computes it but does not store it)
MAMBA_SKIP_DECODE_LOCK = Release(0, 5, 19)  # SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1 drops the base slots to 2
EXTRA_BUFFER_LAZY_WITH_SPEC = Release(0, 5, 19)  # extra_buffer_lazy accepted with speculative decoding
RETURN_SPEC_TOKENS_DETAILS = Release(0, 5, 19)  # chat requests accept return_spec_tokens_details (plain, streamed)

# 0.5.23
OLD_MAMBA_FLAG_REJECTED = Release(0, 5, 23)  # --mamba-scheduler-strategy: an argparse error
SPEC_V2_ENV_IGNORED = Release(0, 5, 23)  # SGLANG_ENABLE_SPEC_V2 no longer even logs
REASONING_TOKENS_DETAILS = Release(0, 5, 23)  # completion_tokens_details.reasoning_tokens when >0 (after 0.5.19)
READY_ROUTE = Release(0, 5, 23)  # GET /ready
LAUNCH_COMMAND_KEY = Release(0, 5, 23)  # /server_info launch_command and frontend
SERVED_NAME_WITH_COLON = Release(0, 5, 23)  # a model equal to the served name is not split as base:adapter
FORCE_NONEMPTY_CONTENT = Release(0, 5, 23)  # chat_template_kwargs.force_nonempty_content
SPEC_ALGORITHMS_DSPARK_UNO = Release(0, 5, 23)  # DSPARK and UNO join the built-in speculative algorithms


# ---------------------------------------------------------------- what a chat request asks for, by release


def spec_details_field(version: str | None, *, stream: bool) -> str | None:
    """The chat request field that makes SGLang `version` report the request's speculative acceptance
    (`spec_accept_length`, `spec_verify_ct`), or None when it has none (or its version is unknown: not asked).

    - >= 0.5.19: `return_spec_tokens_details`; a plain body gets top-level `sglext.spec_tokens_details`, a stream one
      more chunk after the finish chunk, `{"choices": [], "usage": null, "sglext": {"spec_tokens_details": {..}}}`,
      before the usage chunk (serving_chat.py `_build_chat_response` and `_generate_chat_stream`; the details are
      protocol.py `SpecTokensDetails`, built by utils.py `spec_tokens_details_from_meta_info`).
    - 0.5.14 to 0.5.18: `return_meta_info`, plain only: `choices[0].meta_info` is the request's whole meta_info, whose
      spec keys tokenizer_manager.py `_calculate_spec_decoding_metrics` sets. A stream with it is refused with a 400
      ("return_meta_info is not supported with streaming", serving_chat.py `_convert_to_internal_request`), so a
      streamed request of these releases asks for nothing.
    - older: nothing. SGLang would ignore the field (its `ChatCompletionRequest` is a pydantic model with the default
      `extra="ignore"`), but nothing is sent that the server does not read.
    A server whose version is unknown (no /server_info: vLLM; sglang-router, whose own version says nothing of its
    workers') is asked for nothing: vLLM accepts unknown fields (`OpenAIBaseModel`, `extra="allow"`) but logs each.
    """
    release = Release.parse(version)
    if release is None:
        return None
    if release >= RETURN_SPEC_TOKENS_DETAILS:
        return "return_spec_tokens_details"
    if release >= RETURN_META_INFO and not stream:
        return "return_meta_info"
    return None
