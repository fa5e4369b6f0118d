"""What the repair tests share: a repair run's RUN_DIR made by hand over an original dataset, for the repaired export
(`original_rows`, `repair_run`, `ACCEPTED`), and the config of a real repair run against the simulator
(`repair_config`, with the simulator flags `SIM`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.config import Config, InputConfig

Q = {"role": "user", "content": "Why is the sky blue?"}


def original_rows() -> list[dict[str, Any]]:
    """The original dataset: one row of each fate (clean, reasoning in a field or inline, empty, missing, ShareGPT)."""
    return [
        {"id": "clean", "messages": [Q, {"role": "assistant", "content": "Rayleigh.", "reasoning_content": "r"}]},
        {"id": "field", "messages": [Q, {"role": "assistant", "content": "", "reasoning_content": "", "x": 1}]},
        {"id": "inline", "messages": [Q, {"role": "assistant", "content": "<think>cut off"}]},
        {"id": "again", "messages": [Q, {"role": "assistant", "content": ""}]},
        {"id": "missing", "messages": [Q]},
        {"id": "sharegpt", "conversations": [{"from": "human", "value": "Q?"}, {"from": "gpt", "value": ""}]},
        {"id": "pending", "messages": [Q, {"role": "assistant", "content": ""}]},
    ]


def repair_run(
    tmp_path: Path,
    original: Path,
    accepted: dict[str, list[tuple[str | None, str]]],
    rejected: list[str],
    **input_kw: Any,
) -> Path:
    """tmp_path/run, as a repair run over `original` leaves it: `accepted` {id: [(reasoning, answer) per generated
    turn]} in one shard, `rejected` ids in one rejects file, the run's config naming the original."""
    run = tmp_path / "run"
    (run / "shards").mkdir(parents=True)
    (run / "rejects").mkdir()
    cfg = Config(input=InputConfig(path=str(original), **input_kw))
    (run / "run.json").write_bytes(orjson.dumps({"config": cfg.to_dict()}))
    turns = [
        {"id": i, "turns": [{"reasoning": r, "answer": a, "endpoint": "sim"} for r, a in t]}
        for i, t in accepted.items()
    ]
    pq.write_table(pa.Table.from_pylist(turns), run / "shards" / "part-0.parquet")
    pq.write_table(
        pa.table({"id": rejected, "reason": ["empty_answer"] * len(rejected)}), run / "rejects" / "r.parquet"
    )
    return run


ACCEPTED = {
    "field": [("new reasoning", "new answer")],
    "inline": [("thought", "done")],
    "missing": [("why", "because")],
    "sharegpt": [("hmm", "A.")],
}


SIM = ("--served-model-name", "Qwen3.6-27B", "--reasoning-parser", "qwen3", "--mean-output-tokens", "60")


def repair_config(tmp_path: Path, data: Path, url: str, select: str = "all", repair: str = "conversation") -> Path:
    """The config of a repair run of `data` (`input.select`, `input.repair`) against the simulator at `url`."""
    cfg = tmp_path / "repair.toml"
    cfg.write_text(
        f"""
[input]
path = "{data}"
select = "{select}"
repair = "{repair}"
[output]
dir = "{tmp_path / "run"}"
shard_rows = 50
sync_interval_s = 0.1
[generation]
model = "Qwen3.6-27B"
max_tokens = 512
[client]
backoff_base_s = 0.01
[[endpoints]]
url = "{url}"
concurrency = 16
"""
    )
    return cfg
