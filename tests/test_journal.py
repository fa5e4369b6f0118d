from pathlib import Path

from pipeline.store.journal import JournalWriter, encode, list_journals, read_journal


def _write(path: Path, n: int) -> None:
    writer = JournalWriter(path.parent, 0, 0)
    writer.append([encode("accepted", {"id": f"r{i}", "created_at": i}) for i in range(n)])
    writer.close()


def test_round_trip(tmp_path):
    _write(tmp_path / "worker-0.0.jsonl", 3)
    entries = list(read_journal(tmp_path / "worker-0.0.jsonl"))
    assert [(e.kind, e.row["id"]) for e in entries] == [("accepted", "r0"), ("accepted", "r1"), ("accepted", "r2")]


def test_torn_tail_is_ignored(tmp_path):
    path = tmp_path / "worker-0.0.jsonl"
    _write(path, 5)
    data = path.read_bytes()
    for cut in range(len(data) - 40, len(data)):
        path.write_bytes(data[:cut])
        ids = [e.row["id"] for e in read_journal(path)]
        assert ids == [f"r{i}" for i in range(len(ids))]
        assert len(ids) >= 4


def test_garbage_lines_are_skipped_not_fatal(tmp_path):
    path = tmp_path / "worker-0.0.jsonl"
    _write(path, 2)
    with path.open("ab") as f:
        f.write(b'{"kind": "accepted", "row": {"id": "torn"\n[1, 2]\n{"kind": "odd", "row": {"id": "x"}}\n\x00\x00\n')
        f.write(encode("rejected", {"id": "after"}))
    assert [e.row["id"] for e in read_journal(path)] == ["r0", "r1", "after"]


def test_missing_journal_reads_as_empty(tmp_path):
    assert list(read_journal(tmp_path / "worker-0.0.jsonl")) == []


def test_rotate_deletes_and_advances(tmp_path):
    writer = JournalWriter(tmp_path, 3, 7)
    writer.append([encode("accepted", {"id": "a"})])
    assert [(j.worker, j.seq) for j in list_journals(tmp_path)] == [(3, 7)]
    writer.rotate()
    assert list_journals(tmp_path) == []
    assert writer.seq == 8
    writer.append([])  # nothing to write creates no file
    assert list_journals(tmp_path) == []


def test_a_single_turn_row_journals_its_text_once_and_reads_back_whole(tmp_path):
    from pipeline.store import synthetic as syn

    row = syn.accepted("p0", text_bytes=5000)
    conversation = syn.accepted("p1", text_bytes=5000)
    conversation["turns"] = [{**conversation["turns"][0], "reasoning": "earlier turn"}, conversation["turns"][0]]
    lines = [encode("accepted", row), encode("accepted", conversation)]
    assert lines[0].count(row["reasoning"].encode()) == 1
    assert lines[1].count(conversation["reasoning"].encode()) == 2  # a conversation keeps every turn
    path = tmp_path / "worker-0.0.jsonl"
    path.write_bytes(b"".join(lines))
    assert [e.row for e in read_journal(path)] == [row, conversation]
