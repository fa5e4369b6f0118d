import pytest

from pipeline.config import ValidateConfig
from pipeline.records import Completion
from pipeline.validator import repetition_share, validate

CFG = ValidateConfig()


def comp(reasoning: str | None, answer: str, finish: str = "stop") -> Completion:
    return Completion(reasoning=reasoning, answer=answer, finish_reason=finish, completion_tokens=10)


@pytest.mark.parametrize(
    ("completion", "reason"),
    [
        (comp("thinking", "42"), None),
        (comp("thinking", "", "length"), "truncated"),
        (comp("thinking", "partial answer", "length"), "truncated"),
        (comp("", "", "length"), "truncated"),
        (comp(None, ""), "empty_response"),
        (comp("  ", "\n"), "empty_response"),
        (comp("the answer is 42", ""), "answer_in_reasoning"),
        (comp(None, "42"), "empty_reasoning"),
    ],
    ids=[
        "ok",
        "truncated-thinking",
        "truncated-answer",
        "truncated-wins",
        "empty",
        "whitespace",
        "in-reasoning",
        "no-reasoning",
    ],
)
def test_reasons_and_precedence(completion: Completion, reason: str | None) -> None:
    verdict = validate(completion, CFG, thinking=True)
    assert verdict.reason == reason
    assert verdict.ok is (reason is None)
    if reason:
        assert verdict.detail


def test_thinking_off_does_not_need_reasoning() -> None:
    assert validate(comp(None, "42"), CFG, thinking=False).ok


def test_thresholds_are_config() -> None:
    relaxed = ValidateConfig(reject_truncated=False, require_reasoning=False)
    assert validate(comp("x", "partial", "length"), relaxed).ok
    assert validate(comp(None, "42"), relaxed).ok
    assert validate(comp("r", "ab"), ValidateConfig(min_answer_chars=3)).reason == "empty_answer"


def test_degenerate_repetition() -> None:
    loop = "I think the answer is seven and then " * 40
    assert repetition_share(loop) > 0.8
    assert repetition_share("a perfectly ordinary sentence with many different words in it " * 2) < 0.8
    cfg = ValidateConfig(max_repetition=0.5)
    assert validate(comp(loop, "7"), cfg).reason == "degenerate_repetition"
    assert validate(comp("short thought", "7"), cfg).ok
