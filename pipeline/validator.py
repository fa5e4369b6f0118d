"""Pure checks on a completion. A bad completion is data: a Verdict with a reason code, never an exception.

The dataset is what the target model did, so a completion is accepted only as the model finished it:
`finish_reason` `stop` (`tool_calls` is a call, rejected `tool_call` for a text turn). Reason precedence (DESIGN.md
sections 5 and 8b): `looping` when the stream guard stopped the generation (its own finding, whatever else holds),
truncated (`length`), tool_call (a call, or tool-call markup left as text in a row sent with tools), unfinished
(any other finish reason: `abort`, an empty or unknown one), empty_response, looping (a stored turn that ends in
its loop: it ran to the limit), answer_in_reasoning, think_marker, looping (`validate.reject_looping = "any"`),
empty_answer, empty_reasoning, then the optional degenerate_repetition check.

Repetition the model ended itself is kept by default and measured: every verdict carries `repetition_chars`, the
first verbatim repeating run of the reasoning or the answer by the loop detector's text rule (pipeline/loops.py),
a run copied whole from the prompt aside. A `truncated` completion that loops says so in its detail.
"""

from __future__ import annotations

from .config import ValidateConfig
from .loops import GUARD_REPEAT, Loop, find_loop
from .records import Completion, Prompt, Verdict

STORED = ""  # the finish reason of a turn read back from a dataset (regen audit): how it ended is unknown
# What tool-call markup looks like when the server parsed none out (SGLang's function-call detectors: qwen25/hermes,
# llama3, mistral, deepseek, kimi-k2, qwen3-coder, gpt-oss): an answer holding one is a call, not an answer.
TOOL_CALL_MARKUP = (
    "<tool_call>",
    "<|python_tag|>",
    "[TOOL_CALLS]",
    "<｜tool▁calls▁begin｜>",
    "<|tool_calls_section_begin|>",
    "<function=",
    "<|call|>",
)


def validate(
    completion: Completion, cfg: ValidateConfig, thinking: bool = True, prompt: Prompt | None = None
) -> Verdict:
    """Judge one completion. `thinking` is whether reasoning was asked for (generation.thinking); `prompt` what was
    sent (a run copied from it is not a loop; tool-call markup in a row sent with tools is a call)."""
    answer = (completion.answer or "").strip()
    reasoning = (completion.reasoning or "").strip()
    finish = completion.finish_reason
    if completion.loop_stopped:
        return Verdict(False, "looping", f"stopped as it streamed: {completion.loop_detail or 'a loop'}")
    if cfg.reject_truncated and finish == "length":
        where = "inside reasoning" if not answer else "in the answer"
        tokens = completion.completion_tokens
        after = f" after {tokens} tokens" if tokens is not None else ""  # an audited dataset's turns have no count
        detail = f"finish_reason=length {where}{after}"
        loop = looping(completion, prompt) if cfg.reject_looping != "off" else ""
        return Verdict(False, "truncated", f"{detail}; {loop}" if loop else detail)
    if completion.tool_calls or finish == "tool_calls":
        return Verdict(False, "tool_call", f"called {_calls(completion)} instead of answering")
    if prompt is not None and prompt.tools and (markup := _tool_markup(completion)):
        return Verdict(
            False,
            "tool_call",
            f"the answer holds tool-call markup ({markup}) as text: the server parsed no call out of it; start it "
            "with --tool-call-parser (qwen25 for Qwen2.5/Qwen3, llama3, mistral, deepseekv3, ...)",
        )
    if finish not in ("stop", "length", STORED):
        return Verdict(
            False, "unfinished", f"finish_reason={finish!r}: the generation ended before the model finished it"
        )
    if not answer and not reasoning:
        return Verdict(False, "empty_response", f"no answer and no reasoning (finish_reason={finish or 'unknown'})")
    loops = _loops(completion, prompt)
    repetition = max((loop.length for _, loop, _ in loops), default=0)
    if finish == STORED and cfg.reject_looping != "off" and (ran := _ran_to_the_limit(loops, answer)):
        return Verdict(False, "looping", ran, repetition)
    if cfg.reject_answer_in_reasoning and not answer and reasoning and finish in ("stop", STORED):
        return Verdict(False, "answer_in_reasoning", f"answer empty, reasoning has {len(reasoning)} chars", repetition)
    if cfg.reject_think_markers and (marker := _think_marker(answer, reasoning)):
        return Verdict(False, "think_marker", marker, repetition)
    if cfg.reject_looping == "any" and loops:
        return Verdict(False, "looping", loops[0][1].describe(loops[0][0]), repetition)
    if cfg.require_answer and len(answer) < cfg.min_answer_chars:
        return Verdict(False, "empty_answer", f"answer has {len(answer)} chars (< {cfg.min_answer_chars})", repetition)
    if thinking and cfg.require_reasoning and not reasoning:
        return Verdict(False, "empty_reasoning", "thinking was on but no reasoning came back", repetition)
    if cfg.max_repetition > 0:
        share = repetition_share(completion.answer + "\n" + (completion.reasoning or ""))
        if share >= cfg.max_repetition:
            return Verdict(
                False, "degenerate_repetition", f"one 8-word phrase covers {share:.0%} of the text", repetition
            )
    return Verdict(True, repetition_chars=repetition) if repetition else _NO_REPETITION


THINK_MARKERS = ("<think>", "</think>")
_NO_REPETITION = Verdict(True, repetition_chars=0)


def _loops(completion: Completion, prompt: Prompt | None) -> list[tuple[str, Loop, int]]:
    """The first loop of the reasoning and of the answer (name, loop, the text's length); a run copied whole from
    the prompt is not one (the prompt's text is joined only when a loop is found)."""
    found: list[tuple[str, Loop, int]] = []
    exempt: str | None = None
    for name, text in (("reasoning", completion.reasoning), ("answer", completion.answer)):
        loop = find_loop(text)
        if loop is not None and prompt is not None:
            exempt = prompt.text() if exempt is None else exempt
            loop = find_loop(text, exempt) if text and text[loop.start : loop.end] in exempt else loop
        if loop is not None and text:
            found.append((name, loop, len(text)))
    return found


def _ran_to_the_limit(loops: list[tuple[str, Loop, int]], answer: str) -> str:
    """A stored turn (how it ended unknown) that ended in its loop as only a generation cut at the limit does: a
    reasoning ending in its loop with no answer after it (the thinking never closed), or a text ending in more
    repetition than a finished answer has (the guard's rule, loops.GUARD_REPEAT). "" otherwise."""
    for name, loop, length in loops:
        if loop.end >= length and ((name == "reasoning" and not answer) or loop.length - loop.period >= GUARD_REPEAT):
            return f"ends in a loop, as a generation cut at its limit does: {loop.describe(name)}"
    return ""


def looping(completion: Completion, prompt: Prompt | None = None) -> str:
    """Where the reasoning or the answer first loops (start, period, copies, a bounded excerpt), or ""."""
    loops = _loops(completion, prompt)
    return loops[0][1].describe(loops[0][0]) if loops else ""


def _tool_markup(completion: Completion) -> str:
    """The tool-call markup an answer holds as text, or ""."""
    answer = completion.answer or ""
    return next((m for m in TOOL_CALL_MARKUP if m in answer), "")


def _calls(completion: Completion) -> str:
    """The tools a completion called, by name (`finish_reason=tool_calls` when the server listed none)."""
    names = [str((call.get("function") or {}).get("name")) for call in completion.tool_calls]
    return ", ".join(names) if names else "a tool (finish_reason=tool_calls)"


def _think_marker(answer: str, reasoning: str) -> str:
    """Where a think tag survived the reasoning split (a parser failure or a second thinking block), or ""."""
    for name, text in (("answer", answer), ("reasoning", reasoning)):
        # Both tags end in ">": one memchr-fast scan for it first (a 10 KB trace: 0.2 us, against 5 us to look for
        # "think>"; 85 of the 120 real reasoning traces have no ">"), then one scan for what both tags end in.
        if ">" not in text or "think>" not in text:
            continue
        for tag in THINK_MARKERS:
            if tag in text:
                return f"{tag} left in the {name} after the reasoning split"
    return ""


def repetition_share(text: str, n: int = 8) -> float:
    """Fraction of the text's words covered by its most frequent n-word phrase (1.0 = one phrase looping)."""
    words = text.split()
    if len(words) < n * 4:
        return 0.0
    counts: dict[tuple[str, ...], int] = {}
    for i in range(0, len(words) - n + 1):
        gram = tuple(words[i : i + n])
        counts[gram] = counts.get(gram, 0) + 1
    top = max(counts.values())
    return min(1.0, top * n / len(words)) if top > 1 else 0.0
