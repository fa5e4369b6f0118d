"""`--format tokenized`: rows rendered with a Qwen3-style chat template by a tiny byte-level BPE tokenizer
(tests/helpers/tokenizer.py, the `tokenizers` library; nothing downloaded), whose loss masks, decoded, give back
exactly each generated assistant turn: reasoning, `</think>`, answer and `<|im_end|>`, never a header or the
prompt's `<think>`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.dataset.export import ExportOptions
from pipeline.dataset.exporters import export
from pipeline.errors import ConfigError
from tests.helpers.conversation_runs import make_conversation_run, rows
from tests.helpers.tokenizer import QWEN3_STYLE, masked_runs

pytest.importorskip("transformers")


def _decode(tokenizer_dir: Path) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    return lambda ids: tok.decode(ids, skip_special_tokens=False)


def generated(k: int, rid: str = "multi") -> str:
    return f"{rid} reasoning {k}\n</think>\n\n{rid} answer {k}<|im_end|>"


def _export(tmp_path: Path, tokenizer_dir: Path, **kwargs: Any) -> dict[str, dict[str, Any]]:
    out = tmp_path / "out"
    summary = export(tmp_path / "run", "tokenized", out, ExportOptions(tokenizer=tokenizer_dir, **kwargs))
    assert summary["file_format"] == "parquet"
    files = str(out / summary["data_files"]["train"])
    loaded = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(tmp_path / "hf"))
    return {r["id"]: {**r, "_summary": summary} for r in loaded}


def test_expanded_rows_mask_exactly_each_generated_turn(tmp_path: Path, tokenizer_dir: Path) -> None:
    make_conversation_run(tmp_path / "run")
    got = _export(tmp_path, tokenizer_dir, expand_turns=True)
    decode = _decode(tokenizer_dir)
    assert sorted(got) == ["kept#turn1", "multi#turn0", "multi#turn1", "multi#turn2", "single#turn0"]
    for k in range(3):
        row = got[f"multi#turn{k}"]
        assert row["num_tokens"] == len(row["input_ids"]) == len(row["loss_mask"])
        assert row["num_loss_tokens"] == sum(row["loss_mask"])
        assert [decode(run) for run in masked_runs(row["input_ids"], row["loss_mask"])] == [generated(k)]
        text = decode(row["input_ids"])
        assert text.endswith("<|im_start|>assistant\n<think>\n" + generated(k) + "\n")  # the prompt's <think> is 0
    assert [decode(r) for r in masked_runs(got["kept#turn1"]["input_ids"], got["kept#turn1"]["loss_mask"])] == [
        generated(0, "kept")
    ]
    # The history of turn 2 is rendered as the server saw it: answers only, no loss on them.
    history = decode(got["multi#turn2"]["input_ids"])
    assert "multi answer 0<|im_end|>" in history and "multi reasoning 0" not in history


def test_whole_conversations_mask_history_turns_as_the_template_renders_them(
    tmp_path: Path, tokenizer_dir: Path
) -> None:
    make_conversation_run(tmp_path / "run")
    got = _export(tmp_path, tokenizer_dir)
    decode = _decode(tokenizer_dir)
    multi = got["multi"]
    runs = [decode(r) for r in masked_runs(multi["input_ids"], multi["loss_mask"])]
    assert runs == ["multi answer 0<|im_end|>", "multi answer 1<|im_end|>", generated(2)]
    assert multi["_summary"]["notes"] == {"reasoning_not_rendered": 2}  # the history turns of "multi"
    kept = got["kept"]
    assert [decode(r) for r in masked_runs(kept["input_ids"], kept["loss_mask"])] == [generated(0, "kept")]
    assert "an answer from the input" in decode(kept["input_ids"])  # an input turn: context, never trained on
    schema = pq.read_schema(tmp_path / "out" / "data" / "train-00000.parquet")
    assert schema.field("loss_mask").type.value_type == pa.int8()


def test_a_chat_template_file_replaces_the_tokenizers(tmp_path: Path, tokenizer_dir: Path) -> None:
    template = tmp_path / "template.jinja"
    template.write_text(QWEN3_STYLE.replace("'<think>\\n' }}{%- endif -%}", "'' }}{%- endif -%}"))
    make_conversation_run(tmp_path / "run", [r for r in rows() if r["id"] == "single"])
    got = _export(tmp_path, tokenizer_dir, chat_template=template)
    decode = _decode(tokenizer_dir)
    single = got["single"]
    assert [decode(r) for r in masked_runs(single["input_ids"], single["loss_mask"])] == [
        "<think>\nsingle reasoning 0\n</think>\n\nsingle answer 0<|im_end|>"  # <think> is generated here
    ]


def test_a_missing_tokenizer_is_a_config_error(tmp_path: Path) -> None:
    make_conversation_run(tmp_path / "run")
    with pytest.raises(ConfigError, match="not a folder"):
        export(tmp_path / "run", "tokenized", tmp_path / "out", ExportOptions(tokenizer=tmp_path / "nowhere"))


def test_an_empty_tokenizer_folder_is_named_in_one_line(tmp_path: Path) -> None:
    make_conversation_run(tmp_path / "run")
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        ConfigError, match=r"--tokenizer .*empty: no tokenizer in this folder \(none of tokenizer\.json"
    ) as e:
        export(tmp_path / "run", "tokenized", tmp_path / "out", ExportOptions(tokenizer=tmp_path / "empty"))
    assert "\n" not in str(e.value) and "huggingface" not in str(e.value).lower()
    assert not (tmp_path / "out").exists()


def test_a_missing_chat_template_is_checked_before_the_tokenizer(tmp_path: Path, tokenizer_dir: Path) -> None:
    make_conversation_run(tmp_path / "run")
    missing = tmp_path / "nope.jinja"
    for folder in (tokenizer_dir, tmp_path / "nowhere"):  # named first, whatever the tokenizer folder holds
        with pytest.raises(ConfigError, match=r"--chat-template .*nope\.jinja: No such file"):
            export(
                tmp_path / "run", "tokenized", tmp_path / "out", ExportOptions(tokenizer=folder, chat_template=missing)
            )
    assert not (tmp_path / "out").exists()


def _many_rows(n: int) -> list[dict[str, Any]]:
    """`n` rows, copies of the conversation rows under their own ids, in a run of more than one export batch."""
    base = rows()
    return [{**base[i % len(base)], "id": f"{base[i % len(base)]['id']}-{i}"} for i in range(n)]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((folder / "data").iterdir())} | {
        "README.md": (folder / "README.md").read_bytes()
    }


def test_encoding_many_texts_at_once_writes_what_one_text_at_a_time_writes(
    tmp_path: Path, tokenizer_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The texts of a batch are encoded a few calls at a time (issue 40): the files are the bytes one call per text
    writes, across export batches (BATCH_ROWS) and with the texts cut into many calls."""
    from pipeline.dataset import tokenized
    from pipeline.dataset.export import BATCH_ROWS

    make_conversation_run(tmp_path / "run", _many_rows(BATCH_ROWS + 200))
    options = ExportOptions(tokenizer=tokenizer_dir, rows_per_file=700)
    export(tmp_path / "run", "tokenized", tmp_path / "batched", options)
    monkeypatch.setattr(tokenized, "ENCODE_CHARS", 1)  # each text in a call of its own
    export(tmp_path / "run", "tokenized", tmp_path / "alone", options)
    assert _files(tmp_path / "batched") == _files(tmp_path / "alone")
    assert sorted(_files(tmp_path / "alone")) == ["README.md", "train-00000.parquet", "train-00001.parquet"]


def test_the_encoder_gives_each_text_the_ids_transformers_gives_it(tmp_path: Path, tokenizer_dir: Path) -> None:
    from transformers import AutoTokenizer

    from pipeline.dataset.tokenized import Encoder

    texts = ["", "multi answer <|im_end|>\n", "émoji 🙂 tabs\tand  spaces", "", "<think>\nq</think>" * 40, "x"]
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    expected = [list(tok(text, add_special_tokens=False)["input_ids"]) if text else [] for text in texts]
    plain = Encoder(tok)
    assert plain.backend is not None  # a plain fast tokenizer: its backend's batch encode
    truncating = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    truncating.backend_tokenizer.enable_truncation(max_length=4)  # transformers turns it off when it encodes
    other = Encoder(truncating)
    assert other.backend is None  # asked through transformers
    for encoder in (plain, other):
        ids, lengths = encoder.encode(texts)
        assert lengths.tolist() == [len(e) for e in expected]
        assert ids.dtype == "int32" and ids.tolist() == [i for e in expected for i in e]
