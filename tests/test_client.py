import pytest

from pipeline.config import GenerationConfig
from pipeline.endpoints.client import build_payload_base, request_seed
from pipeline.endpoints.reasoning import split_reasoning


@pytest.mark.parametrize(
    ("content", "reasoning", "finish", "expected"),
    [
        ("\n\nThe answer is 4.", "Two plus two.", "stop", ("Two plus two.", "The answer is 4.")),
        ("Two plus two.\n</think>\n\nThe answer is 4.", None, "stop", ("Two plus two.", "The answer is 4.")),
        ("<think>Two plus two.</think>4", None, "stop", ("Two plus two.", "4")),
        ("still thinking about it", None, "length", ("still thinking about it", "")),
        ("just an answer", None, "stop", ("just an answer", "")),  # qwen3 force mode: no </think>, all reasoning
        ("a</think>b</think>c", None, "stop", ("a", "b</think>c")),
    ],
    ids=[
        "parser-on",
        "parser-off-no-open-tag",
        "parser-off-open-tag",
        "truncated-parser-off",
        "no-tags",
        "first-close",
    ],
)
def test_split_reasoning(content: str, reasoning: str | None, finish: str, expected: tuple[str | None, str]) -> None:
    assert split_reasoning(content, reasoning, thinking=True) == expected  # the finish reason no longer matters


def test_thinking_off_keeps_content() -> None:
    assert split_reasoning("x</think>y", None, thinking=False) == (None, "x</think>y")


def test_request_seed_is_stable_and_varies_by_attempt() -> None:
    assert request_seed(0, "p1", 0) == request_seed(0, "p1", 0)
    assert len({request_seed(0, "p1", a) for a in range(4)}) == 4
    assert request_seed(0, "p1", 0) != request_seed(1, "p1", 0)
    assert 0 <= request_seed(5, "x" * 1000, 3) < 2**31


def test_payload_always_sends_max_tokens_and_thinking() -> None:
    base = build_payload_base(GenerationConfig(model="Qwen3.6-27B", max_tokens=123, thinking=False))
    assert base["max_tokens"] == 123
    assert base["chat_template_kwargs"] == {"enable_thinking": False}
    assert base["separate_reasoning"] is True
