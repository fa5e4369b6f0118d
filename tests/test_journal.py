import os
import random
from pathlib import Path

from pipeline.store import journal
from pipeline.store.journal import JournalWriter, encode, list_journals, read_journal, write_all


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


def _chunks(n: int) -> list[bytes]:
    rng = random.Random(n)
    return [bytes([65 + i % 26]) * rng.choice([0, 1, 7, 300, 5000]) for i in range(n)]


def test_every_chunk_is_written_in_order_past_one_writev(tmp_path):
    chunks = _chunks(3 * journal._IOV_MAX + 5)  # several writev calls, empty chunks among them
    with open(tmp_path / "out", "wb") as fh:
        write_all(fh.fileno(), chunks)
    assert (tmp_path / "out").read_bytes() == b"".join(chunks)


def test_writes_cut_short_by_the_system_are_finished(tmp_path, monkeypatch):
    # A disk or a signal may cut a write short anywhere: inside a chunk, at a boundary, after a few bytes.
    real = os.writev
    cuts = iter(random.Random(7).choice([1, 299, 300, 301, 4999, 10_000]) for _ in range(10_000))

    def short_writev(fd: int, buffers: list[bytes]) -> int:
        data = b"".join(buffers)[: next(cuts)]
        return real(fd, [data])

    monkeypatch.setattr(os, "writev", short_writev)
    chunks = _chunks(400)
    with open(tmp_path / "out", "wb") as fh:
        write_all(fh.fileno(), chunks)
    assert (tmp_path / "out").read_bytes() == b"".join(chunks)
