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
    cfg = ValidateConfig(max_repetition=0.5, reject_looping=False)  # (on, `looping` would name it first)
    assert validate(comp(loop, "7"), cfg).reason == "degenerate_repetition"
    assert validate(comp(loop, "7"), ValidateConfig(max_repetition=0.5)).reason == "looping"
    assert validate(comp("short thought", "7"), cfg).ok


LOOP = "Let me check the sum again. 1 + 3 + 5 + 7 = 16, and sixteen is four squared, so the pattern holds. "


@pytest.mark.parametrize(
    ("completion", "reason"),
    [
        (comp("Start:\n" + LOOP * 30, "16"), "looping"),  # escaped the loop and answered: still never stored
        (comp("Start:\n" + LOOP * 30, "", "abort"), "looping"),  # stopped by the stream guard: not empty_answer
        (comp("thinking", "The answer is 16. " + LOOP * 30), "looping"),
        (comp("Start:\n" + LOOP * 30, "", "length"), "truncated"),  # length is always truncated (DESIGN.md 5)
        (comp("Start:\n" + LOOP * 3, "16"), None),  # three copies of a 96-char unit: under 600 repeated chars
        (comp("Start:\n" + LOOP * 30 + "</think>", "16"), "think_marker"),
    ],
    ids=["escaped", "guard-stopped", "in-answer", "length-is-truncated", "short-repeat-ok", "think-marker-first"],
)
def test_looping(completion: Completion, reason: str | None) -> None:
    assert validate(completion, CFG).reason == reason


def test_looping_detail_says_where_and_is_bounded() -> None:
    verdict = validate(comp("Start:\n" + LOOP * 300, "16"), CFG)
    assert verdict.reason == "looping"
    assert verdict.detail.startswith(f"reasoning loops from char 7: a {len(LOOP)}-char unit repeated 300.0 times")
    assert len(verdict.detail) < 400
    truncated = validate(comp("Start:\n" + LOOP * 300, "", "length"), CFG)
    assert truncated.detail.endswith(verdict.detail) and truncated.detail.startswith("finish_reason=length")


def test_looping_can_be_turned_off() -> None:
    off = ValidateConfig(reject_looping=False)
    assert validate(comp("Start:\n" + LOOP * 30, "16"), off).ok
    assert validate(comp("Start:\n" + LOOP * 30, "", "length"), off).detail == (
        "finish_reason=length inside reasoning after 10 tokens"
    )


def test_a_truncated_turn_without_a_token_count_does_not_say_none() -> None:
    """An audited dataset's stored turns carry no token counts: the detail leaves the count out."""
    verdict = validate(Completion(reasoning="r", answer="", finish_reason="length", completion_tokens=None),
                       ValidateConfig())  # fmt: skip
    assert verdict.reason == "truncated" and "None" not in verdict.detail
    assert verdict.detail.startswith("finish_reason=length inside reasoning")


@pytest.mark.parametrize("tag", ["<think>", "</think>"])
@pytest.mark.parametrize("where", ["answer", "reasoning"])
@pytest.mark.parametrize("text", ["plain prose", "x > 0 and y >= 1 -> think> ok", "caf\u00e9 \u2264 na\u00efve"])
def test_a_think_tag_left_in_either_field_is_named(tag: str, where: str, text: str) -> None:
    # with and without other ">" in the text, ASCII or not: the check looks for ">" first
    fields = {"reasoning": f"{text} reasoning", "answer": f"{text} answer"}
    fields[where] = f"{text} {tag} more {text}"
    verdict = validate(comp(fields["reasoning"], fields["answer"]), CFG, thinking=True)
    assert verdict.reason == "think_marker"
    assert verdict.detail == f"{tag} left in the {where} after the reasoning split"


def test_gt_signs_without_a_tag_are_no_marker() -> None:
    assert validate(comp("if x > 2 then x -> y; think >= twice", "a > b"), CFG, thinking=True).ok
