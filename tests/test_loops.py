"""The loop detector (pipeline/loops.py) on real text both ways: it passes every one of 120 real, complete
long-chain-of-thought traces; its text rule finds the 80 real loops within ~6,000 characters of where their
repeating run begins, and the guard stops each of them, run on to max_tokens, once 8,000 characters repeat
(../shared/traces, read in place); and on code-heavy text of our own, which repeats lines without looping."""

from __future__ import annotations

import json
import random
import statistics
from typing import Any

import pytest

from pipeline.loops import (
    GUARD_KEEP,
    GUARD_REPEAT,
    KEEP,
    KEY,
    MAX_PERIOD,
    MIN_REPEAT,
    MIN_REPEAT_FILLER,
    STRIDE,
    Loop,
    LoopGuard,
    _extend,
    _tail_loop,
    find_loop,
    tail_loop,
)
from tests.helpers.paths import SHARED, needs_shared


def _tail_loop_unbounded(text: str, offset: int = 0) -> Loop | None:
    """tail_loop as it was first written: candidate periods up to MAX_PERIOD whatever the text's length (tail_loop
    looks only as far as `reach(len(text))`, the longest period a loop of that text can have)."""
    return _tail_loop(text, offset, MAX_PERIOD)


def _find_loop_exact(text: str | None) -> Loop | None:
    """find_loop without its screens or bounds: the unbounded tail_loop on the cut-out tail at every checkpoint
    (what find_loop must equal)."""
    if not text:
        return None
    n = len(text)
    for at in (*range(STRIDE, n, STRIDE), n):
        low = max(0, at - KEEP)
        found = _tail_loop_unbounded(text[low:at], low)
        if found is not None:
            return _extend(text, found)
    return None


TRACES = SHARED / "traces"
needs_traces = needs_shared("traces", "normal.jsonl")


def _rows(name: str) -> list[dict[str, Any]]:
    with open(TRACES / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _streamed(text: str, seed: int) -> LoopGuard:
    """A guard fed `text` in pieces of 1-60 characters, as SSE deltas come, until it flags or the text ends."""
    return _streamed_by(text, seed, MIN_REPEAT)  # the text's rule (find_loop's): stricter than the guard's


def _streamed_by(text: str, seed: int, least: int = GUARD_REPEAT) -> LoopGuard:
    rng, guard, i = random.Random(seed), LoopGuard(least), 0
    while i < len(text) and guard.loop is None:
        k = rng.randint(1, 60)
        guard.feed(text[i : i + k])
        i += k
    guard.check()
    return guard


@needs_traces
def test_every_normal_trace_passes() -> None:
    flagged = [
        (i, field)
        for i, row in enumerate(_rows("normal.jsonl"))
        for field in ("reasoning", "answer")
        if find_loop(row[field]) or _streamed(row[field] or "", i).loop
    ]
    assert flagged == []


def _runaway(row: dict[str, Any], chars: int = 130_000) -> str:
    """A looping trace as it would have gone on to max_tokens 32,768 (~130K characters): its unit, repeated on."""
    text, period = row["reasoning"], row["loop_period_chars"]
    unit = text[-period:]
    return text + unit * ((chars - len(text)) // period + 1) if len(text) < chars else text


@needs_traces
def test_real_loops_are_caught_by_the_guard_past_its_repetition() -> None:
    """Each of the 80 real loops, run on to ~130K characters as it would have to max_tokens 32,768, is stopped by
    the guard once GUARD_REPEAT characters repeat beyond its first unit, and not before: far short of the limit."""
    rows = _rows("looping.jsonl")
    distances = []
    for i, row in enumerate(rows):
        text = _runaway(row)
        run_start = len(row["reasoning"]) - row["loop_run_chars"]
        whole, guard = find_loop(text), _streamed_by(text, i)
        assert whole is not None and guard.loop is not None, i
        assert guard.loop.period == whole.period or whole.period % guard.loop.period == 0
        assert guard.loop.length - guard.loop.period >= GUARD_REPEAT
        distances.append(guard.chars - run_start)
    assert max(distances) <= GUARD_REPEAT + 2 * 2700 + STRIDE + 60, max(distances)  # units up to 2,634 characters
    assert statistics.median(distances) <= GUARD_REPEAT + 2 * STRIDE, distances
    spent = [len(rows[i]["reasoning"]) - rows[i]["loop_run_chars"] + d for i, d in enumerate(distances)]
    assert sum(spent) <= 0.2 * 130_000 * len(rows)  # >= 80% of a run to max_tokens saved


@needs_traces
def test_real_loops_are_caught_early_by_the_text_rule() -> None:
    rows = _rows("looping.jsonl")
    distances = []
    for i, row in enumerate(rows):
        text, run_start = row["reasoning"], len(row["reasoning"]) - row["loop_run_chars"]
        whole, guard = find_loop(text), _streamed_by(text, i, MIN_REPEAT)
        if whole is None or guard.loop is None:
            continue
        assert whole.at == min(len(text), (whole.at + STRIDE - 1) // STRIDE * STRIDE)  # a checkpoint or the end
        assert guard.loop.period == whole.period or whole.period % guard.loop.period == 0
        distances.append(guard.chars - run_start)
    caught = sum(d <= 6000 for d in distances)
    assert caught >= 0.9 * len(rows), (caught, len(rows))
    assert statistics.median(distances) <= 4000, distances


@needs_traces
def test_the_reported_loop_is_where_the_trace_says() -> None:
    for row in _rows("looping.jsonl"):
        text = row["reasoning"]
        loop = find_loop(text)
        assert loop is not None
        assert loop.end == len(text)  # followed to the end of the text, where the generation was cut
        assert row["loop_period_chars"] % loop.period == 0 or loop.period % row["loop_period_chars"] == 0
        assert abs(loop.length - row["loop_run_chars"]) <= row["loop_period_chars"]


def _table() -> str:
    head = "| n | n^2 | n^3 | prime |\n|---|---|---|---|\n"
    return head + "".join(f"| {n} | {n * n} | {n**3} | {'yes' if _prime(n) else 'no'} |\n" for n in range(1, 400))


def _prime(n: int) -> bool:
    return n > 1 and all(n % k for k in range(2, int(n**0.5) + 1))


CODE_HEAVY = {
    "table": _table(),
    "zero_array": "static const uint8_t crc_table[256] = {\n"
    + "".join("    " + ", ".join(["0x00"] * 16) + ",\n" for _ in range(16))
    + "};\n",
    "box_grid": "".join("+---" * 10 + "+\n" + "|   " * 10 + "|\n" for _ in range(10)) + "+---" * 10 + "+\n",
    "identical_lines": "def tick(x):\n" + "    x = x + 1\n" * 120 + "    return x\n",
    "asserts": "".join(f"    assert square({i}) == {i * i}\n" for i in range(500)),
    "json_records": "["
    + ",\n".join(f'  {{"id": {i}, "name": "item-{i}", "price": 0.0, "tags": []}}' for i in range(300))
    + "]",
    "html_rows": "<table>\n" + "  <tr><td></td><td></td><td></td></tr>\n" * 50 + "</table>\n",
    "switch": "switch (op) {\n"
    + "".join(f"  case {k}:\n    result = apply(op_{k}, a, b);\n    break;\n" for k in range(200))
    + "}\n",
    "separator_comments": "".join(f"# {'-' * 76}\n# section {k}\n" for k in range(12)),
}


@pytest.mark.parametrize("name", sorted(CODE_HEAVY), ids=sorted(CODE_HEAVY))
def test_code_heavy_text_is_not_a_loop(name: str) -> None:
    text = CODE_HEAVY[name]
    assert find_loop(text) is None
    assert _streamed(text, 0).loop is None


LOOPS = {
    "sentence": ("Let me look at the problem again. " * 3 + "Wait, I should not use any markdown.\n" * 80, 37),
    "equation": ("so e^{i\\pi/6} " * 2 + "= e^{i\\pi/6 + i2\\pi/3} " * 200, 23),
    "paragraph": (
        "First attempt.\n\n"
        + "So the number of students is prime, and the number plus two is prime as well. Checking 41: "
        "41 + 2 = 43, prime. Checking 47: 47 + 2 = 49, not prime. So the answer is 41.\n\n" * 6,
        170,
    ),
    "program": ("def f(x):\n" + "    if x > 0:\n        x = g(x)\n        return f(x - 1)\n" * 60, 55),
}


@pytest.mark.parametrize("name", sorted(LOOPS), ids=sorted(LOOPS))
def test_loops_are_found_with_their_unit(name: str) -> None:
    text, period = LOOPS[name]
    loop = find_loop(text)
    assert loop is not None and loop.period == period
    assert text[loop.start : loop.start + period] == text[loop.start + period : loop.start + 2 * period]
    assert loop.end == len(text)
    assert _streamed(text, 1).loop is not None


def test_a_loop_the_model_escapes_is_still_found() -> None:
    body = "The sum of the first ten odd numbers, 1 + 3 + 5 + ... + 19, is one hundred. " * 30
    text = "Let me think about this carefully. " + body + "Okay, I am going in circles. The answer is 100."
    loop = find_loop(text)
    assert loop is not None and loop.period == len(body) // 30
    assert loop.end < len(text) and text[loop.end :].startswith("Okay")


def test_the_detail_is_bounded() -> None:
    unit = "".join(f"step {i}: nothing new here, moving on. " for i in range(100))  # a 3,790-char unit
    loop = find_loop("intro. " + unit * 3)
    assert loop is not None and loop.period == len(unit)
    detail = loop.describe("reasoning")
    assert len(detail) < 400 and detail.startswith("reasoning loops from char 5: a 3,790-char unit repeated 3 times")


def test_the_guard_holds_a_bounded_tail() -> None:
    guard = LoopGuard()
    rng = random.Random(5)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    for _ in range(20000):
        guard.feed(" ".join(rng.choice(words) for _ in range(4)) + ". ")
    assert guard.check() is None
    assert len(guard._tail) <= GUARD_KEEP and guard.chars > 10 * GUARD_KEEP
    assert guard.feed("x" * 7000) is None  # a run of 7,000 (the model may end it)
    assert guard.feed("x" * 2000) is not None  # then it loops: 8,000 repeated beyond its unit of one character
    assert guard.loop is not None and guard.loop.start > guard.chars - 9001 - 40


@needs_traces
def test_the_screened_find_loop_decides_as_the_exact_one_on_every_real_trace() -> None:
    for name in ("normal.jsonl", "looping.jsonl"):
        for i, row in enumerate(_rows(name)):
            for field in ("reasoning", "answer"):
                assert find_loop(row[field]) == _find_loop_exact(row[field]), (name, i, field)


def _words(rng: random.Random, n: int) -> str:
    """n characters of varied, non-repeating text (non-Latin-1 now and then, as real traces have)."""
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:()=+-*/\n\u2212\u2264\u03c0"
    return "".join(rng.choice(alphabet) for _ in range(n))


def _synthetic() -> list[str]:
    rng = random.Random(11)
    texts = [
        "",
        "x",
        "a" * (MIN_REPEAT_FILLER + 1),
        "a" * MIN_REPEAT_FILLER,
        "ab" * 1500,
        "0, " * 1000,
        _words(rng, 3 * KEEP),  # no loop at all, many checkpoints
    ]
    for period in (1, 2, 7, 31, 32, 33, 64, 599, 600, 601, 1023, 1024, 1025, 2048, MAX_PERIOD - 1, MAX_PERIOD):
        unit = _words(rng, period)
        repeat = max(period, MIN_REPEAT if len(set(unit)) >= 10 else MIN_REPEAT_FILLER)
        for extra in (-1, 0, 1, 37):  # just short of, exactly at, and just over the minimum repetition
            run = (unit * (2 + (repeat + extra) // period))[: period + repeat + extra]
            for prefix in (0, 1, STRIDE - len(run) % STRIDE, 2500, KEEP):
                head = _words(rng, prefix)
                texts.append(head + run)  # a loop at the very end
                texts.append(head + run + _words(rng, 300))  # a loop the text escapes
                texts.append(head + run + _words(rng, 2 * STRIDE + 5))  # escaped, then checkpoints after it
    for period in (MAX_PERIOD + 1, MAX_PERIOD + 100):  # units too long to be looked for
        unit = _words(rng, period)
        texts.append(_words(rng, 100) + unit * 2 + unit[:700])
    for _ in range(200):  # random mixes: text, a run of random period and length, text
        period = rng.choice([rng.randint(1, 40), rng.randint(1, MAX_PERIOD + 50)])
        unit = _words(rng, period)
        run = (unit * (2 + 3000 // period))[: rng.randint(period, period + 3000)]
        texts.append(_words(rng, rng.randint(0, 6000)) + run + _words(rng, rng.randint(0, 3000)))
    return texts


def test_the_screened_find_loop_decides_as_the_exact_one_on_edge_cases() -> None:
    texts = _synthetic()
    found = 0
    for i, text in enumerate(texts):
        exact = _find_loop_exact(text)
        assert find_loop(text) == exact, (i, len(text))
        found += exact is not None
    assert 0.2 * len(texts) < found < 0.8 * len(texts)  # both verdicts are well represented


def test_the_bounded_tail_loop_decides_as_the_unbounded_one_on_every_tail() -> None:
    # the stream guard calls tail_loop on its kept tail: every length from the shortest checked up, every kind of run
    for i, text in enumerate(_synthetic()[::7]):
        for n in sorted({*range(KEY + MIN_REPEAT, len(text) + 1, 97), len(text)}):
            assert tail_loop(text[:n], 5) == _tail_loop_unbounded(text[:n], 5), (i, n)


def test_the_detail_counts_copies_as_a_person_reads_them() -> None:
    whole = find_loop("intro. " + "ab" * 5588)
    assert whole is not None and "a 2-char unit repeated 5,588 times" in whole.describe("answer")
    part = find_loop("intro. " + "alpha beta gamma; " * 100 + "alpha beta")  # an 18-char unit, 100 and 10/18
    assert part is not None and "repeated 100.6 times" in part.describe("answer")
