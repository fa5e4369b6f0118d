"""Deterministic text plans: lengths, shape, and the token/character contract."""

from __future__ import annotations

import statistics

from pipeline.sim import text


def test_plan_is_deterministic_and_mostly_reasoning() -> None:
    a = text.make_plan(12345, 2000, thinking=True)
    assert a == text.make_plan(12345, 2000, thinking=True)
    assert a != text.make_plan(12346, 2000, thinking=True)
    assert a.reasoning_tokens > 5 * a.content_tokens
    assert len(a.reasoning) == 4 * a.reasoning_tokens and len(a.content) == 4 * a.content_tokens
    assert a.content.startswith("\n\nThe answer is")


def test_lengths_center_on_the_mean_with_a_heavy_tail() -> None:
    lengths = [text.make_plan(text.digest(i), 2000, thinking=True).natural_tokens for i in range(3000)]
    assert 1800 < statistics.mean(lengths) < 2200
    assert max(lengths) > 3 * statistics.median(lengths)


def test_prefix_split() -> None:
    plan = text.make_plan(7, 300, thinking=True)
    r = plan.reasoning_tokens
    assert text.raw_prefix(plan, 10) == (plan.reasoning[:40], "", False)
    assert text.raw_prefix(plan, r + 1) == (plan.reasoning, "", True)
    assert text.raw_prefix(plan, r + 3) == (plan.reasoning, plan.content[:8], True)
    off = text.make_plan(7, 300, thinking=False)
    assert off.reasoning == "" and text.raw_prefix(off, 2) == ("", off.content[:8], False)


def test_long_plans_wrap_the_text_block() -> None:
    plan = text.make_plan(3, 200_000, thinking=True)
    assert len(plan.reasoning) == 4 * plan.reasoning_tokens


def test_prompt_key_ignores_key_order() -> None:
    assert text.prompt_key([{"role": "user", "content": "a"}]) == text.prompt_key([{"content": "a", "role": "user"}])
