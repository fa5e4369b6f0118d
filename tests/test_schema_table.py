"""schema.to_table: the single-turn fast path (turns built from the top-level columns, strings from one joined
buffer) gives exactly the table Arrow's own per-value conversion gives, for every shape of row the store writes."""

import dataclasses

import pyarrow as pa
import pytest

from pipeline.records import Completion, Prompt, RequestOverrides, Turn
from pipeline.schema import (
    TURN_KEYS,
    accepted_row,
    own_turn_only,
    reject_schema,
    rejected_row,
    shard_schema,
    to_table,
    turn_of,
    turn_row,
)
from pipeline.store import synthetic as syn


@pytest.fixture(autouse=True, params=["system", "jemalloc"])
def pool(request):
    """Every case on both paths of the string columns: the joined buffer (system allocator) and Arrow's own
    conversion (jemalloc, a run's pool on Linux; mimalloc where pyarrow has no jemalloc)."""
    before = pa.default_memory_pool()
    try:
        chosen = pa.system_memory_pool() if request.param == "system" else pa.jemalloc_memory_pool()
    except NotImplementedError:
        chosen = pa.mimalloc_memory_pool()
    pa.set_memory_pool(chosen)
    yield chosen.backend_name
    pa.set_memory_pool(before)


def _arrow(rows, schema):
    return pa.Table.from_arrays([pa.array([r.get(f.name) for r in rows], type=f.type) for f in schema], schema=schema)


def _conversation(pid: str) -> dict:
    prompt = Prompt(id=pid, messages=({"role": "user", "content": "u2"},), source="t")
    first = Completion(reasoning="r1 é", answer="a1", finish_reason="stop", prompt_tokens=3, completion_tokens=4)
    last = Completion(reasoning="r2 ✓", answer="a2", finish_reason="stop", prompt_tokens=5, completion_tokens=6)
    return accepted_row(prompt, last, attempts=1, turns=[Turn.of(first, 2), Turn.of(last, 1)])


def _single(pid: str, reasoning: str | None, answer: str) -> dict:
    prompt = Prompt(id=pid, messages=({"role": "user", "content": "q"},), source="t")
    completion = Completion(reasoning=reasoning, answer=answer, finish_reason="stop", completion_tokens=7)
    return accepted_row(prompt, completion, attempts=1)


CASES = {
    "ascii": [syn.accepted(f"p{i}", text_bytes=700) for i in range(5)],
    "unicode and empty": [_single("u0", "思考 🙂", "答え"), _single("u1", "", "x")],
    "null reasoning": [_single("n0", None, "a"), _single("n1", "r", "b")],
    "a conversation among single turns": [syn.accepted("s0"), _conversation("c0"), syn.accepted("s1")],
    "conversations only": [_conversation("c0"), _conversation("c1")],
}


@pytest.mark.parametrize("rows", CASES.values(), ids=CASES.keys())
def test_fast_path_equals_arrows_own_conversion(rows):
    schema = shard_schema()
    table = to_table(rows, schema)
    table.validate(full=True)
    assert table.equals(_arrow(rows, schema))
    assert table.column("turns").to_pylist() == [r["turns"] for r in rows]


def test_rejects_with_and_without_a_completion():
    schema = reject_schema()
    rows = [syn.rejected("r0"), syn.bad_input("b0"), syn.rejected("r1")]
    assert [own_turn_only(r) for r in rows] == [True, False, True]
    assert to_table(rows, schema).equals(_arrow(rows, schema))
    assert to_table(rows[::2], schema).equals(_arrow(rows[::2], schema))


def test_a_turn_that_differs_from_its_row_is_not_taken_for_the_row():
    row = syn.accepted("p0")
    row["turns"] = [{**row["turns"][0], "latency_s": 9.5}]
    assert not own_turn_only(row)
    assert to_table([row], shard_schema()).column("turns").to_pylist()[0][0]["latency_s"] == 9.5


def test_a_lone_surrogate_fails_as_arrow_fails():
    prompt = Prompt(id="x", messages=({"role": "user", "content": "q"},), source="t")
    row = rejected_row(prompt, Completion(reasoning="bad \ud800", answer="", finish_reason="stop"), 1, "x", "y")
    with pytest.raises(Exception) as arrow_error:
        _arrow([row], reject_schema())
    with pytest.raises(arrow_error.type):  # the store salvages exactly these (shards.ARROW_VALUE_ERRORS)
        to_table([row], reject_schema())


def test_a_turn_record_has_the_turns_columns_fields_and_round_trips_through_its_row():
    assert tuple(f.name for f in dataclasses.fields(Turn)) == TURN_KEYS
    turn = Turn.of(Completion(reasoning="r", answer="a", finish_reason="stop", endpoint="e", latency_s=1.5), 3)
    assert turn_of(turn_row(turn)) == turn and turn_row(turn)["attempts"] == 3
    assert turn_of({"reasoning": "r", "answer": "a", "finish_reason": "stop"}) == Turn("r", "a", "stop", attempts=0)


def test_a_rows_kept_fields_are_the_prompts_extra_and_nothing_of_its_request():
    prompt = Prompt(
        id="x",
        messages=({"role": "user", "content": "q"},),
        extra={"cat": "math", "_note": "kept"},
        overrides=RequestOverrides(temperature=0.1, seed=4),
        temperature=0.7,
    )
    row = accepted_row(prompt, Completion(reasoning="r", answer="a", finish_reason="stop"), attempts=1)
    assert (row["cat"], row["_note"]) == ("math", "kept")
    assert to_table([row], shard_schema(("cat", "_note"))).column("_note").to_pylist() == ["kept"]
    assert row["seed"] == 0 and not {"overrides", "temperature", "_request_overrides"} & set(row)
