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
    cfg = ValidateConfig(max_repetition=0.5)  # (with reject_looping = "any", `looping` would name it first)
    assert validate(comp(loop, "7"), cfg).reason == "degenerate_repetition"
    assert validate(comp(loop, "7"), ValidateConfig(max_repetition=0.5, reject_looping="any")).reason == "looping"
    assert validate(comp("short thought", "7"), cfg).ok


LOOP = "Let me check the sum again. 1 + 3 + 5 + 7 = 16, and sixteen is four squared, so the pattern holds. "


ANY = ValidateConfig(reject_looping="any")


def stopped(reasoning: str, answer: str = "") -> Completion:
    """What the stream guard returns: the text as far as it streamed, finish_reason abort, its finding."""
    return Completion(reasoning, answer, "abort", loop_stopped=True, loop_detail="reasoning loops from char 7: ...")


@pytest.mark.parametrize(
    ("completion", "default", "strict"),
    [
        (comp("Start:\n" + LOOP * 30, "16"), None, "looping"),  # escaped the loop and answered: the model ended it
        (stopped("Start:\n" + LOOP * 30), "looping", "looping"),  # stopped by the stream guard: not empty_answer
        (stopped("no loop in the part that streamed"), "looping", "looping"),  # the guard's finding, not find_loop's
        (stopped("Start:\n" + LOOP * 30, "an answer"), "looping", "looping"),
        (comp("thinking", "The answer is 16. " + LOOP * 30), None, "looping"),
        (comp("Start:\n" + LOOP * 30, "", "length"), "truncated", "truncated"),  # length is always truncated
        (comp("Start:\n" + LOOP * 3, "16"), None, None),  # three copies of a 96-char unit: under 600 repeated
        (comp("Start:\n" + LOOP * 30 + "</think>", "16"), "think_marker", "think_marker"),
    ],
    ids=["escaped", "guard-stopped", "guard-stopped-no-loop-found", "guard-stopped-with-answer", "in-answer",
         "length-is-truncated", "short-repeat-ok", "think-marker-first"],
)  # fmt: skip
def test_looping(completion: Completion, default: str | None, strict: str | None) -> None:
    assert validate(completion, CFG).reason == default
    assert validate(completion, ANY).reason == strict


def test_a_kept_repetition_is_measured() -> None:
    kept = validate(comp("Start:\n" + LOOP * 30, "16"), CFG)
    assert kept.ok and kept.repetition_chars == len(LOOP) * 30
    assert validate(comp("plain thinking", "16"), CFG).repetition_chars in (None, 0)


def test_looping_detail_says_where_and_is_bounded() -> None:
    verdict = validate(comp("Start:\n" + LOOP * 300, "16"), ANY)
    assert verdict.reason == "looping"
    assert verdict.detail.startswith(f"reasoning loops from char 7: a {len(LOOP)}-char unit repeated 300 times")
    assert len(verdict.detail) < 400
    truncated = validate(comp("Start:\n" + LOOP * 300, "", "length"), CFG)
    assert truncated.detail.endswith(verdict.detail) and truncated.detail.startswith("finish_reason=length")


def test_looping_can_be_turned_off_but_a_guard_stop_is_never_accepted() -> None:
    off = ValidateConfig(reject_looping="off")
    assert validate(comp("Start:\n" + LOOP * 30, "16"), off).ok
    assert validate(comp("Start:\n" + LOOP * 30, "", "length"), off).detail == (
        "finish_reason=length inside reasoning after 10 tokens"
    )
    assert validate(stopped("Start:\n" + LOOP * 30, "16"), off).reason == "looping"


@pytest.mark.parametrize("finish", ["abort", "", "content_filter", "function_call", "eos?"])
def test_only_what_the_model_finished_is_accepted(finish: str) -> None:
    verdict = validate(Completion("thinking", "a whole answer", finish, completion_tokens=5), CFG)
    if finish == "":  # a stored turn read back from a dataset (audit): how it ended is unknown
        assert verdict.ok
        return
    assert verdict.reason == "unfinished" and repr(finish) in verdict.detail
    # whatever the other rules say: even with every other check off
    loose = ValidateConfig(require_answer=False, require_reasoning=False, reject_looping="off")
    assert validate(Completion("t", "a", finish), loose).reason == "unfinished"


def test_repetition_copied_from_the_prompt_is_not_a_loop() -> None:
    from pipeline.records import Prompt

    zeros = "0" * 4000
    prompt = Prompt("p", ({"role": "user", "content": f"Echo the registry value: {zeros}"},))
    answer = f"The value is {zeros}. Done."
    assert validate(comp("thinking", answer), ANY, prompt=prompt).ok
    assert validate(comp("thinking", answer), ANY).reason == "looping"  # without the prompt, it would be one
    longer = f"The value is {zeros * 2}. Done."  # beyond what the prompt holds: the model's own repetition
    assert validate(comp("thinking", longer), ANY, prompt=prompt).reason == "looping"


@pytest.mark.parametrize("markup", ["<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>",
                                    "<function=get_weather>{}</function>"])  # fmt: skip
def test_tool_call_markup_in_a_row_sent_with_tools_is_a_call(markup: str) -> None:
    from pipeline.records import Prompt

    tools = ({"type": "function", "function": {"name": "get_weather", "parameters": {}}},)
    with_tools = Prompt("p", ({"role": "user", "content": "weather?"},), tools=tools)
    verdict = validate(comp("I should call the tool.", markup), CFG, prompt=with_tools)
    assert verdict.reason == "tool_call" and "--tool-call-parser" in verdict.detail
    without = Prompt("p", ({"role": "user", "content": "show me the tool call syntax"},))
    assert validate(comp("thinking", markup), CFG, prompt=without).ok  # no tools sent: text about tool calls


def test_a_stored_turn_that_ends_in_its_loop_ran_to_the_limit() -> None:
    """regen audit: a stored turn's finish reason is unknown; one whose reasoning ends in its loop, no answer after
    it, is `looping` (not answer_in_reasoning); one the model escaped is kept."""
    ran = validate(Completion("Start:\n" + LOOP * 30, "", ""), CFG)
    assert ran.reason == "looping" and "ends in a loop" in ran.detail
    assert validate(Completion("Start:\n" + LOOP * 30 + "So the answer is 16.", "16", ""), CFG).ok
    assert validate(Completion("Start:\n" + LOOP * 3, "", ""), CFG).reason == "answer_in_reasoning"
    long_answer = Completion("thinking", "The list: " + LOOP * 120, "")  # 11,520 characters repeated to the end
    assert validate(long_answer, CFG).reason == "looping"


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
