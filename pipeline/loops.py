"""The one loop detector: where a text falls into verbatim repetition, found the same way everywhere a text is
judged (the stream guard that stops a looping generation, the validator's `looping` reason, the `repetition_chars`
column, `regen audit`, `regen inspect`).

Degenerate means it does not end. A model that falls into a loop repeats one unit until `max_tokens`; a model asked
for "this sentence 100 times", a 1,000-digit repeating decimal or an empty 100-row table repeats a unit too, and then
ends by itself. So repetition is judged by two rules of the same detector:
- *The guard's* (`GUARD_REPEAT`): a stream is stopped only once `GUARD_REPEAT` (8,000) characters repeat verbatim
  beyond the first copy of the unit, more than a finished answer has: answers that end by themselves with up to
  8,000 characters of repetition are never stopped. A generation the guard stopped is rejected `looping`.
- *The text's* (`MIN_REPEAT`): a text *has* a loop when its tail at a checkpoint is periodic: for some period p (1 to
  `MAX_PERIOD` characters) every character of the last L characters equals the one p before it, and the repetition
  beyond the first copy of the unit, L - p, is at least max(p, `MIN_REPEAT`) characters (2,000, `MIN_REPEAT_FILLER`,
  for a unit of fewer than 10 distinct characters: zero-filled arrays, grids, identical program lines). Its length
  is the `repetition_chars` of a stored row; a completion that did not end (`length`, or a stored turn that ends in
  its loop) is rejected `looping` by it, and one the model ended itself only with `validate.reject_looping = "any"`.
  Repetition copied verbatim from the prompt (`exempt`) is not a loop.
Checkpoints come every `STRIDE` characters, so a loop the model later escapes is found as well as one that runs to
the end.

Why these numbers (measured on ../shared/traces, BENCHMARKS.md "Loops"): across every 128-character prefix of
120 real, complete long-chain-of-thought traces, the most any tail repeated beyond its first unit was 477
characters, and never two whole copies of a unit of 200+ characters; the 80 real loops have units of 23 to 2,634
characters and run to the token limit, so the guard catches each within GUARD_REPEAT + 2 units of where it starts.

How a check runs: the last `KEY` characters of the text are looked for in the `MAX_PERIOD` characters before
them (`str.rfind`, in C); each of the nearest few occurrences is a candidate period, and the length of the
periodic tail for it is found by comparing slices backwards (block by block, then a binary search inside the
first block that differs). When the key recurs all along a candidate's periodic tail (a short pattern inside a long
unit: a run of `0, 0, 0, ...`), the next candidates come from that whole run and the character before it: the key's
own multiples would otherwise fill every candidate and hide the unit.
Natural text rarely repeats its last 32 characters at all, so most checks cost one `rfind` over a few KB:
microseconds per KB of text (BENCHMARKS.md). The guard keeps only the last `GUARD_KEEP` characters of a stream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

STRIDE = 1024  # characters between two checks of a growing text
MAX_PERIOD = 4000  # the longest repeating unit looked for (real loops: up to ~3,000)
MIN_REPEAT = 600  # characters repeated beyond the first copy of the unit, at least (and at least one more unit)
FEW_CHARS = 10  # a unit of fewer distinct characters (the 80 real loops' units have 14 or more) ...
MIN_REPEAT_FILLER = 2000  # ... must repeat this much: rows of zeros, grids, identical program lines
KEY = 32  # the closing characters whose earlier occurrences give the candidate periods
CANDIDATES = 8  # occurrences tried per check, nearest first
KEEP = 2 * MAX_PERIOD + MIN_REPEAT_FILLER + STRIDE  # the tail find_loop checks at a checkpoint: any loop of its rule
GUARD_REPEAT = 8000  # the guard stops a stream once this much repeats beyond the first copy of the unit
GUARD_KEEP = max(KEEP, MAX_PERIOD + GUARD_REPEAT + STRIDE)  # what a stream guard holds: any loop of its rule
EXCERPT = 160  # characters of the unit kept in a report


@dataclass(frozen=True, slots=True)
class Loop:
    """A repeating run: it starts at character `start`, repeats a `period`-character unit, and spans `length`
    characters (the first copy included) as far as it was seen; `at` is where the text stood when it was found."""

    start: int
    period: int
    length: int
    at: int
    unit: str  # the first copy of the unit, at most EXCERPT characters

    @property
    def copies(self) -> float:
        return self.length / self.period

    @property
    def end(self) -> int:
        return self.start + self.length

    def describe(self, where: str) -> str:
        """One line for a reject's detail: where, the period, how far, and a bounded excerpt of the unit."""
        cut = "..." if len(self.unit) < self.period else ""
        return (
            f"{where} loops from char {self.start:,}: a {self.period:,}-char unit repeated {_count(self.copies)} times "
            f"(to char {self.end:,}); unit: {self.unit!r}{cut}"
        )


def _count(copies: float) -> str:
    """How many copies, as a person reads it: "5,588" for a whole number, "9.5" otherwise."""
    text = f"{copies:,.1f}"
    return text.removesuffix(".0")


def repeat_needed(unit: str, least: int = MIN_REPEAT) -> int:
    """Characters that must repeat beyond the first copy of `unit` to call its repetition a loop: one more copy
    and `least` (MIN_REPEAT, or the guard's GUARD_REPEAT), and MIN_REPEAT_FILLER at least for a unit of few distinct
    characters (a line of a zero-filled table, a row of a box-drawn grid, an identical program line)."""
    filler = len(set(unit)) < FEW_CHARS
    return max(len(unit), max(least, MIN_REPEAT_FILLER) if filler else least)


def periodic_tail(text: str, period: int, limit: int) -> int:
    """Length of the longest tail of `text` with this period (the first copy included), looked at up to `limit`."""
    n = len(text)
    edge = n - period  # text[edge:] matched text[edge + period:] so far
    step = max(period, 256)
    while edge > 0 and n - edge < limit:
        lo = max(0, edge - step)
        if text[lo:edge] == text[lo + period : edge + period]:
            edge = lo
            continue
        hi = edge  # the smallest x in [lo, edge] with text[x:edge] == text[x + period : edge + period]
        while lo < hi:
            mid = (lo + hi) // 2
            if text[mid:edge] == text[mid + period : edge + period]:
                hi = mid
            else:
                lo = mid + 1
        edge = lo
        break
    return n - edge


def reach(n: int, least: int = MIN_REPEAT) -> int:
    """The longest period a loop in the last `n` characters of a text can have: a reported loop's periodic tail is
    at least two copies of its unit and `least` characters past the first copy, so p <= n / 2 and p <= n - least;
    and MAX_PERIOD at most."""
    return max(0, min(MAX_PERIOD, n // 2, n - least))


def tail_loop(text: str, offset: int = 0, least: int = MIN_REPEAT) -> Loop | None:
    """The loop `text` ends in, or None. `offset` is where `text` starts in the whole (a guard's kept tail);
    `least` the repetition the rule needs beyond the first copy (MIN_REPEAT, or the guard's GUARD_REPEAT)."""
    return _tail_loop(text, offset, reach(len(text), least), least)  # farther back: periods no loop can have


def _tail_loop(text: str, offset: int, longest: int, least: int = MIN_REPEAT) -> Loop | None:
    """tail_loop, with candidate periods up to `longest` (any larger is never reported: see `reach`)."""
    n = len(text)
    if n < KEY + least:
        return None
    key, size = text[n - KEY :], KEY
    floor = max(0, n - KEY - longest)
    end = n - 1
    tried: list[tuple[int, int]] = []  # (period, periodic tail) of the candidates so far, nearest (shortest) first
    for _ in range(CANDIDATES):
        pos = text.rfind(key, floor, end)
        if pos < 0:
            return None
        period = n - size - pos
        length = periodic_tail(text, period, n)
        end = pos + size - 1
        if size == KEY and length >= KEY + period and length < n:
            # The key recurs all along this period's run (a short pattern: `0, 0, 0, ...`): so would its multiples,
            # using up CANDIDATES without repeating any farther. A longer unit holds the whole run and the
            # character before it: look for that instead, from the nearest occurrence on.
            key, size = text[n - length - 1 :], length + 1
            floor, end = max(0, n - size - longest), n - 1
        tried.append((period, length))
        if length - period < least:
            continue
        # a multiple of a shorter unit that repeats as far is that unit's loop, judged as that unit
        unit_len = min(q for q, tail in tried if tail >= length - period)
        start = n - length
        unit = text[start : start + unit_len]
        if length - period >= max(period, repeat_needed(unit, least)):
            return Loop(offset + start, unit_len, length, offset + n, unit[:EXCERPT])
    return None


def _extend(text: str, loop: Loop) -> Loop:
    """The loop found at `loop.at`, followed forward to where the text stops repeating its unit."""
    p, end = loop.period, loop.at
    step = max(p, 256)
    while end < len(text):
        hi = min(len(text), end + step)
        if text[end:hi] == text[end - p : hi - p]:
            end = hi
            continue
        lo = end  # the largest y in [end, hi] with text[end:y] == text[end - p : y - p]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if text[end:mid] == text[end - p : mid - p]:
                lo = mid
            else:
                hi = mid - 1
        end = lo
        break
    return Loop(loop.start, p, end - loop.start, loop.at, loop.unit)


def find_loop(text: str | None, exempt: str = "") -> Loop | None:
    """The first loop in a whole text, checked every STRIDE characters and at the end, then followed to its end;
    None when the text never loops. A repeating run found whole in `exempt` (the prompt: an answer copying a long
    run of its input) is not a loop, and the search goes on after it.

    Each checkpoint is first screened on the whole text, without cutting out the checked tail text[low:at]; it is
    skipped when tail_loop would certainly return None there:
    - the tail is shorter than KEY + MIN_REPEAT characters (tail_loop's own first test); or
    - its last KEY characters do not occur in the `reach(at - low)` characters before them: tail_loop's first
      `rfind`, with its floor and end moved by `low`, finds no candidate and returns None; or
    - its last MIN_REPEAT characters do not occur in the `reach(at - low)` before them. tail_loop reports only a
      candidate period p <= reach(at - low) whose periodic tail (measured exactly by `periodic_tail`, inside
      text[low:at]) is L >= p + max(p, repeat_needed(unit)) >= p + MIN_REPEAT characters; then every character
      of text[at - MIN_REPEAT : at] equals the one p before it, so that string occurs at at - MIN_REPEAT - p,
      which is >= at - L >= low, >= at - MIN_REPEAT - reach(at - low), and ends at at - p <= at - 1: inside the
      range searched. No occurrence, no loop at this checkpoint.
    Otherwise tail_loop runs on the cut-out tail as before, so the verdict is always that of tail_loop at every
    checkpoint (tests/test_loops.py checks it on every real trace and on synthetic edge cases). What is saved is the
    copy of up to KEEP characters per checkpoint (for a text with any non-Latin-1 character a wide copy plus a
    scan for its widest character, which cost more than the `rfind`) and the candidates tail_loop would measure
    where natural text happens to repeat KEY characters.
    """
    if not text:
        return None
    n = len(text)
    after = 0  # the end of the last run copied from `exempt`
    for at in (*range(STRIDE, n, STRIDE), n):
        low = max(after, at - KEEP)
        span = at - low
        if span < KEY + MIN_REPEAT:
            continue  # tail_loop's first test
        longest = MAX_PERIOD if span >= 2 * MAX_PERIOD else min(span // 2, span - MIN_REPEAT)  # reach(span), inline
        if text.rfind(text[at - KEY : at], at - KEY - longest, at - 1) < 0:
            continue  # tail_loop's first step finds no candidate
        if text.rfind(text[at - MIN_REPEAT : at], at - MIN_REPEAT - longest, at - 1) < 0:
            continue  # no period would repeat MIN_REPEAT characters
        found = tail_loop(text[low:at], low)
        if found is not None:
            found = _extend(text, found)
            if not exempt or text[found.start : found.end] not in exempt:
                return found
            after = found.end
    return None


class LoopGuard:
    """Judges a text as it streams: `feed` each piece; it checks every `STRIDE` characters and returns the loop
    once the text loops by the guard's rule (then keeps returning it). Holds at most `GUARD_KEEP` characters,
    whatever the stream's length. `exempt` gives the prompt's text, asked for only when a loop is found: a run
    copied whole from it is not a loop (yet: once the stream repeats beyond what the prompt holds, it is)."""

    __slots__ = ("_exempt", "_pending", "_pending_chars", "_tail", "chars", "least", "loop")

    def __init__(self, least: int = GUARD_REPEAT, exempt: Callable[[], str] | None = None) -> None:
        self.least = least
        self._exempt = exempt
        self._tail = ""
        self._pending: list[str] = []
        self._pending_chars = 0
        self.chars = 0  # characters fed so far
        self.loop: Loop | None = None

    def feed(self, piece: str) -> Loop | None:
        if self.loop is None and piece:
            self._pending.append(piece)
            self._pending_chars += len(piece)
            self.chars += len(piece)
            if self._pending_chars >= STRIDE:
                self.check()
        return self.loop

    def check(self) -> Loop | None:
        """Check now, whatever was fed since the last check (a stream's end)."""
        if self.loop is None and self._pending:
            tail = self._tail + "".join(self._pending)
            self._pending.clear()
            self._pending_chars = 0
            self._tail = tail[-max(KEEP, MAX_PERIOD + self.least + STRIDE) :]
            found = tail_loop(self._tail, self.chars - len(self._tail), self.least)
            if found is not None and self._exempt is not None and self._tail[-found.length :] in self._exempt():
                found = None  # copied from the prompt, as far as it goes
            self.loop = found
        return self.loop
