"""Texts whose correct content is repetition, each ended by the model (`finish_reason: stop`), and runaway loops
that never end (they run to `max_tokens`): the two classes the loop rule must tell apart (issue 36). Shared by the
end-to-end tests (tests/integration/test_fidelity.py) and the loops benchmark (scripts/benchlib/loops.py).

Each legitimate shape repeats verbatim for up to ~7,500 characters (its longest periodic run); the guard stops a
stream only past 8,000 characters repeated beyond the first copy (pipeline/loops.GUARD_REPEAT)."""

from __future__ import annotations


def _song() -> str:
    refrain = (
        "Oh, carry me home on the evening tide,\nwhere the lanterns burn and the gulls still ride;\n"
        "sing it again for the ones who stayed,\ncarry me home when the light's all played.\n"
    )
    verses = [
        "The harbour wakes before the sun,\nthe ropes are coiled, the work begun.\n",
        "My father sailed the northern line,\nhe left his boots, he left me mine.\n",
        "The winter came with teeth of ice,\nwe paid the sea its ancient price.\n",
        "Now I am old and the boats are few,\nbut the tide still knows the way I knew.\n",
        "So if you hear us on the quay,\nsing the refrain along with me.\n",
    ]
    return "".join(v + "\n" + refrain + "\n" for v in verses) + refrain


def _frame(width: int = 80, height: int = 40) -> str:
    top = "+" + "-" * (width - 2) + "+\n"
    return top + ("|" + " " * (width - 2) + "|\n") * (height - 2) + top


LEGIT: dict[str, str] = {
    "sentence_100_times": "Here it is, 100 times:\n\n" + "I will not talk in class.\n" * 100,
    "long_sentence_100_times": "".join(
        "The quick brown fox jumps over the lazy dog near the river.\n" for _ in range(100)
    ),
    "one_seventh_1000_places": "1/7 = 0." + ("142857" * 170)[:1000] + "...",
    "one_third_1000_places": "1/3 = 0." + "3" * 1000 + "... (the 3 repeats forever)",
    "empty_table_100_rows": "| Name | Date | Amount | Notes |\n|---|---|---|---|\n" + "|  |  |  |  |\n" * 100,
    "identical_code_lines_200": "```python\ndef warm_up():\n" + "    counter += 1\n" * 200 + "```\n",
    "empty_json_records_40": "[\n"
    + ",\n".join('  {"id": null, "name": "", "tags": [], "score": 0}' for _ in range(40))
    + "\n]\n",
    "song_with_refrain": _song(),
    "box_frame_80x40": "Here is your frame:\n\n```\n" + _frame() + "```\n",
    "zero_filled_c_array": "static const uint8_t table[512] = {\n"
    + "".join("    " + ", ".join(["0x00"] * 16) + ",\n" for _ in range(32))
    + "};\n",
    "csv_of_zeros_150_rows": "a,b,c,d,e\n" + "0,0,0,0,0\n" * 150,
    "laughter": "ha" * 500 + "! That is the funniest thing I have read today.",
    "dot_grid_30x30": ("· " * 30 + "\n") * 30,
    "progress_bars": "".join(f"step {i:02d}: [##########] 100%\n" for i in range(1)) + "[##########] 100%\n" * 60,
    "html_empty_rows": "<table>\n" + "  <tr><td></td><td></td><td></td></tr>\n" * 60 + "</table>\n",
    "yes_300_times": "Yes\n" * 300,
    "yaml_identical_items": "items:\n" + "  - name: placeholder\n    value: 0\n    enabled: false\n" * 80,
    "checkerboard_16x16": "".join(("■□" * 8 if r % 2 == 0 else "□■" * 8) + "\n" for r in range(16)),
    "sql_identical_inserts": "INSERT INTO events (id, kind, payload) VALUES (DEFAULT, 'tick', NULL);\n" * 90,
    "alphabet_100_times": "abcdefghijklmnopqrstuvwxyz\n" * 100,
    "binary_alternation": "0" + "10" * 2000 + " (4,001 alternating bits)",
    "hello_world_400": "Hello, World!\n" * 400,
    "row_your_boat_round": "Row, row, row your boat,\ngently down the stream.\nMerrily, merrily, merrily, merrily,\n"
    "life is but a dream.\n"
    * 1
    + ("Row, row, row your boat,\ngently down the stream.\nMerrily, merrily, merrily, merrily,\nlife is but a dream.\n")
    * 40,
    "asserts_same_line": "def test_stable():\n" + "    assert stable_hash('x') == 0x5bd1e995\n" * 120,
}


def escaped_table_row() -> str:
    """Prose, a 50-character table row repeated for 650 characters, then prose again (the red-team shape)."""
    head = "Here is the schedule you asked for. " * 3 + "\n\n| slot | who | room | note |\n|---|---|---|---|\n"
    row = "| 09:00 | (open) | (none) | to be confirmed".ljust(48) + "|\n"  # 50 characters
    assert len(row) == 50
    tail = (
        "\nEvery slot is open for now; tell me who takes which and I will fill the table in. The rooms are not "
        "booked yet either, so if anyone needs the large hall, say so before Thursday. I left the notes column "
        "blank on purpose: it is where we will write down any equipment each session needs.\n"
    )
    return head + row * 13 + tail


ZERO_UNIT = "Checking the next block of the matrix, all entries: " + "0, " * 300 + "so the block is zero.\n"


def runaway(kind: str, chars: int = 60_000) -> tuple[str, str]:
    """(reasoning, answer) of a generation that falls into a loop and never ends (to `chars`): `zeros_answer`
    repeats a unit holding a long `0, 0, ...` run in the answer, `zeros_reasoning` the same in the reasoning, and
    `prose` a paragraph of reasoning."""
    if kind == "zeros_answer":
        text = "The matrix, block by block:\n\n"
        return "Let me write the blocks out.", (text + ZERO_UNIT * (chars // len(ZERO_UNIT) + 1))[:chars]
    if kind == "zeros_reasoning":
        return ("Let me look at each block. " + ZERO_UNIT * (chars // len(ZERO_UNIT) + 1))[:chars], ""
    unit = "Wait, I should double-check the parity argument once more before answering, to be sure. "
    return ("Let me set up the problem first. " + unit * (chars // len(unit) + 1))[:chars], ""
