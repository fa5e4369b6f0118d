"""Fault injection, deterministic under the server seed.

A request's fault is drawn from (server seed, prompt key, how many times this prompt has been requested), never
from wall time or arrival order: the same run of the same client meets the same faults, and a retry of a prompt
draws afresh.
"""

from __future__ import annotations

from dataclasses import dataclass

from .text import digest

# Kinds, in the order their probabilities are stacked on [0, 1).
# New kinds go last, so adding one leaves the draws of the others unchanged.
KINDS = ("500", "503", "reset", "hang", "empty", "answer_in_reasoning", "invalid_json", "stall")


@dataclass(frozen=True, slots=True)
class FaultPlan:
    seed: int
    p_500: float = 0.0
    p_503: float = 0.0
    p_reset: float = 0.0
    p_hang: float = 0.0
    p_empty: float = 0.0
    p_answer_in_reasoning: float = 0.0
    p_invalid_json: float = 0.0
    p_stall: float = 0.0

    def __post_init__(self) -> None:
        probs = self.probabilities()
        if any(p < 0 or p > 1 for p in probs) or sum(probs) > 1 + 1e-9:
            raise ValueError(f"fault probabilities must be in [0, 1] and sum to at most 1, got {probs}")

    def probabilities(self) -> tuple[float, ...]:
        return (
            self.p_500,
            self.p_503,
            self.p_reset,
            self.p_hang,
            self.p_empty,
            self.p_answer_in_reasoning,
            self.p_invalid_json,
            self.p_stall,
        )

    @property
    def active(self) -> bool:
        return any(self.probabilities())

    def draw(self, key: str, attempt: int) -> str | None:
        """The fault for the `attempt`-th request (0-based) of prompt `key`, or None."""
        if not self.active:
            return None
        u = (digest("fault", self.seed, key, attempt) >> 11) / float(1 << 53)
        edge = 0.0
        for kind, p in zip(KINDS, self.probabilities(), strict=True):
            edge += p
            if u < edge:
                return kind
        return None


def in_burst(elapsed_s: float, every_s: float, for_s: float) -> bool:
    """Whether a server that opened its port `elapsed_s` ago is inside a 503 burst: the last `for_s` seconds of
    every `every_s`-second period (so the first burst starts `every_s - for_s` after the port opens). Bursts are
    the one time-driven fault: an overloaded or briefly wedged server refuses everything for a while, whatever the
    prompts."""
    if every_s <= 0 or for_s <= 0:
        return False
    return elapsed_s % every_s >= every_s - min(for_s, every_s)
