"""Fault injection, deterministic under the server seed.

A request's fault is drawn from (server seed, prompt key, how many times this prompt has been requested), never
from wall time or arrival order: the same run of the same client meets the same faults, and a retry of a prompt
draws afresh.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from .text import digest


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultRates:
    """The probability of each fault kind per generation request, `p_<kind>`: the one place the kinds are declared.
    `SimConfig` takes them as its `--fail-*` knobs, and a `FaultPlan` draws from them. The fields' order is the order
    the probabilities are stacked on [0, 1): new kinds go last, so adding one leaves the draws of the others
    unchanged."""

    p_500: float = 0.0
    p_503: float = 0.0
    p_reset: float = 0.0
    p_hang: float = 0.0
    p_empty: float = 0.0
    p_answer_in_reasoning: float = 0.0
    p_invalid_json: float = 0.0
    p_stall: float = 0.0  # stream: role chunk and a few deltas, then silence (connection open) until abort/disconnect

    def probabilities(self) -> tuple[float, ...]:
        """The probabilities in stacking order (`RATE_FIELDS`)."""
        return tuple(getattr(self, name) for name in RATE_FIELDS)


RATE_FIELDS = tuple(f.name for f in fields(FaultRates))
KINDS = tuple(name.removeprefix("p_") for name in RATE_FIELDS)  # what `FaultPlan.draw` returns


@dataclass(frozen=True, slots=True)
class FaultPlan(FaultRates):
    seed: int

    def __post_init__(self) -> None:
        probs = self.probabilities()
        if any(p < 0 or p > 1 for p in probs) or sum(probs) > 1 + 1e-9:
            raise ValueError(f"fault probabilities must be in [0, 1] and sum to at most 1, got {probs}")

    @classmethod
    def of(cls, seed: int, rates: FaultRates) -> FaultPlan:
        """The plan that draws `rates` (a `SimConfig`'s, say) under `seed`."""
        return cls(seed, **{name: getattr(rates, name) for name in RATE_FIELDS})

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
