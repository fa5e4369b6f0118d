"""The dataset card of an export: README.md with YAML front matter that `datasets` and the Hub read.

The front matter's `configs` names the exported files per split, so `datasets.load_dataset(OUT_DIR)` loads the
export as written; `dataset_info` gives each config's features, and `license`, `language`, `task_categories` and
`size_categories` are the Hub's metadata (license and language from `CardOptions`, or the config's `[export]`
table when run.json has one). The body records what a reader needs to trust and reproduce the data: model and
sampling, the server settings preflight saw, counts and reject rates by reason, token-length percentiles, and the
command that reproduces the run from `regen-config.toml`, the run's resolved config written beside the card.
Neither file names an endpoint: URLs and hosts are replaced or left out (redact.py), and anything the run knows
as an address is scrubbed from both texts before they are written.
Statistics are computed from the committed files (a few integer columns, streamed), not from run.json counts.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from ..errors import OutputError
from ..store import acceptance, repetition, row_groups
from ..store.files import readable_parts
from ..store.layout import MANIFEST, REJECTS, SHARDS
from ..store.manifest import Manifest, simulated_endpoints
from .features import size_category, yaml_features
from .redact import Hosts, public_config, public_preflight

CARD = "README.md"
CONFIG_FILE = "regen-config.toml"
PERCENTILES = (5, 25, 50, 75, 95, 99)
_SAMPLING = ("temperature", "top_p", "top_k", "min_p", "max_tokens", "seed", "thinking")
UNKNOWN_LICENSE = "unknown"


@dataclass(frozen=True)
class CardOptions:
    """What only the publisher knows: the data's license (a Hub license id) and languages (ISO 639-1 codes)."""

    license: str | None = None
    language: tuple[str, ...] = ()

    def resolved(self, manifest: Manifest) -> CardOptions:
        """These options over the config's `[export]` table (when run.json has one)."""
        table = _section(manifest, "export")
        language = self.language or tuple(_as_list(table.get("language")))
        return CardOptions(self.license or table.get("license") or None, language)


def _as_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    return [str(v) for v in value or []]


def write_card(
    run_dir: Path,
    out: Path,
    export_summary: dict[str, Any],
    *,
    schemas: dict[str, pa.Schema] | None = None,
    options: CardOptions | None = None,
) -> Path:
    """Write `out/README.md` (and `out/regen-config.toml` when run.json has the config); returns the card path.
    `schemas` (split → schema) become the card's features; neither file names an endpoint URL or host."""
    manifest = _manifest(run_dir)
    hosts = Hosts.of_run(run_dir, manifest)
    config = manifest.get("config")
    if isinstance(config, dict):
        _write_text(out / CONFIG_FILE, hosts.scrub(config_toml(public_config(config))))
    stats = run_stats(run_dir)
    opts = (options or CardOptions()).resolved(manifest)
    head = front_matter(export_summary, manifest, schemas or {}, opts)
    text = "---\n" + head + "---\n\n" + _body(export_summary, manifest, stats, opts)
    path = out / CARD
    _write_text(path, hosts.scrub(text))
    return path


# ---------------------------------------------------------------- statistics


def run_stats(run_dir: Path) -> dict[str, Any]:
    """Counts, reject reasons, finish reasons and token-length percentiles of the committed rows."""
    finish: Counter[str] = Counter()
    lengths: dict[str, list[np.ndarray]] = {"completion_tokens": [], "reasoning_tokens": [], "prompt_tokens": []}
    accepted = 0
    for batch in _columns(run_dir / SHARDS, ["finish_reason", *lengths]):
        accepted += batch.num_rows
        finish.update(str(v) for v in batch.column("finish_reason").to_pylist())
        for name, chunks in lengths.items():
            chunks.append(batch.column(name).drop_null().to_numpy(zero_copy_only=False))
    reasons: Counter[str] = Counter()
    for batch in _columns(run_dir / REJECTS, ["reason"]):
        reasons.update(str(v) for v in batch.column("reason").to_pylist())
    rejected = sum(reasons.values())
    return {
        "total": accepted + rejected,
        "accepted": accepted,
        "rejected": rejected,
        "rejected_by_reason": dict(reasons.most_common()),
        "finish_reasons": dict(finish.most_common()),
        "lengths": {name: percentiles(np.concatenate(c) if c else np.empty(0)) for name, c in lengths.items()},
        "spec_accept_length": _acceptance(run_dir),
        "repetition": repetition.summary(repetition.file_count(path) for path in readable_parts(run_dir / SHARDS)),
    }


def _acceptance(run_dir: Path) -> dict[str, Any]:
    """acceptance.summary of every shard's turns, a file's turns at a time (acceptance.Tally: the same figures)."""
    tally = acceptance.Tally()
    for path in readable_parts(run_dir / SHARDS):
        tally.add(acceptance.file_turns(path), {})
    return tally.summary()


def percentiles(values: np.ndarray) -> dict[str, float] | None:
    if len(values) == 0:
        return None
    points = np.percentile(values, PERCENTILES)
    out = {f"p{p}": float(v) for p, v in zip(PERCENTILES, points, strict=True)}
    return {"mean": float(values.mean()), **out, "max": float(values.max())}


def _columns(folder: Path, names: list[str]) -> Iterator[Any]:
    for path in readable_parts(folder):
        yield from row_groups.iter_batches(pq.ParquetFile(path), 65536, names)


# ---------------------------------------------------------------- front matter and body


def front_matter(
    summary: dict[str, Any],
    manifest: Manifest,
    schemas: dict[str, pa.Schema] | None = None,
    options: CardOptions | None = None,
) -> str:
    # Rejects have two more columns, and one config's splits must share their features: rejects get a config.
    def name(split: str) -> str:
        return "default" if split == "train" else split

    configs = [
        {"config_name": name(split), "data_files": [{"split": "train", "path": pattern}]}
        for split, pattern in summary.get("data_files", {}).items()
    ]
    opts = options or CardOptions()
    meta: dict[str, Any] = {"license": opts.license or UNKNOWN_LICENSE}
    if opts.language:
        meta["language"] = list(opts.language)
    meta["task_categories"] = ["text-generation"]
    meta["size_categories"] = [size_category(int(summary.get("rows", 0)))]
    meta["pretty_name"] = f"regen export of {_model(manifest)}"
    meta["tags"] = ["synthetic", "regen", summary.get("format", "chat")]
    if simulated_endpoints(manifest):
        meta["tags"].append("simulated")
    meta["configs"] = configs
    infos = [
        {"config_name": name(split), "features": yaml_features(schema)}
        for split, schema in (schemas or {}).items()
        if split in summary.get("data_files", {})
    ]
    if infos:
        meta["dataset_info"] = infos
    return str(yaml.safe_dump(meta, sort_keys=False, allow_unicode=True))


def _model(manifest: Manifest) -> str:
    return str(_section(manifest, "generation").get("model", "an unknown model"))


def _section(manifest: Manifest, name: str) -> dict[str, Any]:
    section = (manifest.get("config") or {}).get(name)
    return section if isinstance(section, dict) else {}


def _body(summary: dict[str, Any], manifest: Manifest, stats: dict[str, Any], opts: CardOptions) -> str:
    parts = [
        f"# {_model(manifest)} completions (regen)\n",
        f"Generated by regen; exported as `{summary.get('format')}` ({summary.get('file_format')}): "
        f"{summary.get('rows', 0)} rows" + _rejects_note(summary) + ".\n",
        _simulated_note(manifest),
        _shape_note(summary),
        _missing_note(summary),
        _publisher_note(opts),
        _generation_section(manifest),
        _server_section(manifest),
        _counts_section(stats),
        _lengths_section(stats),
        _tokens_note(summary),
        _spec_note(stats.get("spec_accept_length")),
        _repetition_note(stats.get("repetition")),
        _reproduce_section(manifest),
    ]
    return "\n".join(p for p in parts if p)


def _repetition_note(rep: dict[str, Any] | None) -> str:
    """How many rows keep verbatim repetition the model ended itself: kept on purpose, and said so."""
    if not rep or not rep.get("measured"):
        return ""
    if not rep["rows"]:
        return "Repetition: no row repeats a unit verbatim at length (`repetition_chars` is 0 throughout).\n"
    return (
        f"Repetition: {rep['rows']:,} of {rep['measured']:,} rows ({rep['share']:.1%}) repeat a unit verbatim and "
        f"then end (the longest run: {rep['longest_chars']:,} characters; column `repetition_chars`). They are "
        "kept on purpose: the model ended each of them itself (an answer asked to repeat: a table, a refrain, a "
        "value written N times); a generation that fell into repetition it never left was rejected `looping`.\n"
    )


def _simulated_note(manifest: Manifest) -> str:
    if not simulated_endpoints(manifest):
        return ""
    return (
        "**Simulated: not model output.** This run was served by regen's SGLang simulator (`regen sim` or "
        '`url = "sim"`), not by a model: every completion is the simulator\'s filler text. It is fit for testing a '
        "pipeline, never for training or evaluating a model.\n"
    )


def _shape_note(summary: dict[str, Any]) -> str:
    text = f"Reasoning: `{summary.get('reasoning', 'inline')}`"
    text += {
        "field": " (`reasoning_content` on each assistant message)",
        "inline": " (a think block in the content)",
    }.get(summary.get("reasoning", ""), " (dropped)")
    if summary.get("expand_turns"):
        text += "; one row per generated assistant turn (`<id>#turn<k>`, history without reasoning)"
    text += ".\n"
    skipped = summary.get("skipped") or {}
    if skipped:
        text += "\nRows left out because the format's consumer would refuse them:\n\n"
        text += _table(("reason", "rows"), [(f"`{k}`", n) for k, n in skipped.items()])
    return text


def _missing_note(summary: dict[str, Any]) -> str:
    """A partial export (`--partial`) says which committed parts it could not read: their rows are missing."""
    damaged = summary.get("damaged") or []
    if not damaged:
        return ""
    lines = "".join(f"- {d}\n" for d in damaged)
    return (
        "**Incomplete**: exported with `--partial`; these committed parts of the run could not be read, and their "
        f"rows are missing:\n\n{lines}"
    )


def _publisher_note(opts: CardOptions) -> str:
    if opts.license and opts.language:
        return ""
    return (
        "License or language not stated: set them with `regen export --license ID --language CODE` "
        "(or an `[export]` table in the config).\n"
    )


def _rejects_note(summary: dict[str, Any]) -> str:
    if "rejects" in summary.get("data_files", {}):
        return f", plus {summary.get('rejected_rows', 0)} rejected rows in the `rejects` config"
    return ", rejected rows not included"


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text.replace("|", "\\|")


def _generation_section(manifest: Manifest) -> str:
    gen = _section(manifest, "generation")
    rows = [("model", f"`{gen['model']}`")] if "model" in gen else []
    rows += [(key, gen[key]) for key in _SAMPLING if key in gen]
    rows += [(key, value) for key, value in gen.items() if key != "model" and key not in _SAMPLING]
    validate = _section(manifest, "validate")
    rows += [(f"validate.{k}", v) for k, v in validate.items()]
    if not rows:
        return "## Generation\n\nThe run's config is not recorded (no `config` in run.json).\n"
    return "## Generation\n\n" + _table(("setting", "value"), rows)


def _server_section(manifest: Manifest) -> str:
    preflight = manifest.get("preflight")
    expect = (manifest.get("config") or {}).get("expect") or {}
    text = "## Server\n\n"
    endpoints = (manifest.get("config") or {}).get("endpoints") or []
    text += f"{len(endpoints)} endpoint(s) configured.\n\n" if endpoints else ""
    if expect:
        text += "Required server settings (`[expect]`, checked by preflight):\n\n"
        text += _table(("server_args key", "expected"), sorted(expect.items())) + "\n"
    public = public_preflight(preflight)
    if public:
        text += "Server settings reported at preflight (endpoints numbered, not named):\n\n```json\n"
        text += orjson.dumps(public, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n```\n"
    elif not expect:
        text += "No server settings were recorded for this run.\n"
    return text


def _counts_section(stats: dict[str, Any]) -> str:
    total = stats["total"]
    rows: list[tuple[Any, ...]] = [("accepted", stats["accepted"], _rate(stats["accepted"], total))]
    rows.append(("rejected", stats["rejected"], _rate(stats["rejected"], total)))
    rows += [(f"rejected: `{r}`", n, _rate(n, total)) for r, n in stats["rejected_by_reason"].items()]
    text = f"## Counts\n\n{total} prompts reached a final state.\n\n" + _table(("rows", "count", "share"), rows)
    if stats["finish_reasons"]:
        finish = [(f"`{k}`", n) for k, n in stats["finish_reasons"].items()]
        text += "\nFinish reasons of accepted rows:\n\n" + _table(("finish_reason", "count"), finish)
    return text


def _rate(n: int, total: int) -> str:
    return f"{100 * n / total:.2f}%" if total else "-"


def _lengths_section(stats: dict[str, Any]) -> str:
    rows = []
    for name, pct in stats["lengths"].items():
        if pct is None:
            rows.append((name, *(["unknown"] * (len(PERCENTILES) + 2))))
        else:
            rows.append((name, *(_num(v) for v in pct.values())))
    header = ("tokens (accepted rows)", "mean", *(f"p{p}" for p in PERCENTILES), "max")
    return "## Lengths\n\n" + _table(header, rows)


def _tokens_note(summary: dict[str, Any]) -> str:
    """What a row's token columns count: its last generated turn, not the whole conversation (issue 38)."""
    text = (
        "The token counts (this table and the `prompt_tokens`, `completion_tokens`, `reasoning_tokens` and "
        "`finish_reason` columns) describe a row's last generated turn: a multi-turn conversation's earlier turns "
        "are not counted in them"
    )
    if summary.get("expand_turns"):
        return text + "; in these files each row is one turn, with that turn's own counts.\n"
    return text + " (`--expand-turns` gives every turn its own row and counts).\n"


def _spec_note(spec: dict[str, Any] | None) -> str:
    """The serving model's own speculative acceptance on these rows: the baseline a new draft model must beat."""
    if not spec or not spec["turns"]:
        return ""
    if not spec["reported"]:
        return (
            "Speculative acceptance: not reported (`spec_accept_length` is null): the servers ran without speculative "
            "decoding, or their release does not report it per request.\n"
        )
    return (
        f"The serving MTP/draft head's acceptance on this data: mean {spec['mean']:.2f} "
        f"(p10 {spec['p10']:.2f} .. p90 {spec['p90']:.2f}) tokens per verify step, the bonus token included "
        f"(SGLang's `spec_accept_length`, per generated turn; token-weighted {_num2(spec['weighted'])}), over "
        f"{spec['reported']} of {spec['turns']} turns. A draft model trained on it should beat this.\n"
    )


def _num2(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _num(value: float) -> str:
    return f"{value:.0f}" if value == math.floor(value) else f"{value:.1f}"


def _reproduce_section(manifest: Manifest) -> str:
    if not isinstance(manifest.get("config"), dict):
        return "## Reproduce\n\nrun.json holds no config, so the run cannot be reproduced from this export.\n"
    files = (manifest.get("input") or {}).get("files") or []
    text = (
        "## Reproduce\n\n"
        f"`{CONFIG_FILE}` beside this card is the run's resolved config (config hash "
        f"`{manifest.get('config_hash', 'unknown')}`). With the same input and server:\n\n"
        f"```\nregen run {CONFIG_FILE} --endpoint URL --output NEW_RUN_DIR\n```\n\n"
        "Endpoint URLs are not published: the file names placeholders (`http://endpoint-N.invalid`, which stop at "
        "preflight), so give your servers with `--endpoint URL` (repeatable).\n\n"
        "Without `--output` the run goes to the config's `output.dir`, where rerunning resumes the original run "
        "(and sends no request for prompts already done).\n"
    )
    if files:
        text += f"\nInput files ({len(files)}): " + ", ".join(f"`{f}`" for f in files[:10])
        text += " ..." if len(files) > 10 else ""
        text += "\n"
    return text


# ---------------------------------------------------------------- hooks for the repaired export's card


def markdown_table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    """A Markdown table, cells escaped (dataset/repair.py writes its counts with it)."""
    return _table(header, rows)


def generation_section(manifest: Manifest) -> str:
    """`## Generation`: model, sampling and validators from run.json's config."""
    return _generation_section(manifest)


def simulated_note(manifest: Manifest) -> str:
    """The warning that the run's completions are the simulator's filler, or "" for a run of real servers."""
    return _simulated_note(manifest)


def publisher_note(opts: CardOptions) -> str:
    """The note asking for a license and language, or "" when both are stated."""
    return _publisher_note(opts)


# ---------------------------------------------------------------- files


def config_toml(config: dict[str, Any]) -> str:
    """The config dict as TOML that `load_config` reads back to the same config; null values are left out."""
    head: list[str] = []
    tables: list[str] = []
    for key, value in config.items():
        if isinstance(value, dict):
            tables.append(f"[{_key(key)}]\n" + "".join(_assign(k, v) for k, v in value.items()))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for item in value:
                tables.append(f"[[{_key(key)}]]\n" + "".join(_assign(k, v) for k, v in item.items()))
        else:
            head.append(_assign(key, value))
    return "# the resolved config of a regen run (written by regen export)\n" + "".join(head) + "\n".join(["", *tables])


def _assign(key: str, value: Any) -> str:
    return "" if value is None else f"{_key(key)} = {_toml_value(value)}\n"


def _key(key: str) -> str:
    bare = key and all(c.isascii() and (c.isalnum() or c in "-_") for c in key)
    return key if bare else _toml_string(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value if v is not None) + "]"
    if isinstance(value, dict):
        items = [f"{_key(k)} = {_toml_value(v)}" for k, v in value.items() if v is not None]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    raise OutputError(f"cannot write config value {value!r} ({type(value).__name__}) as TOML")


def _toml_string(text: str) -> str:
    # JSON string escapes are TOML basic-string escapes, except that TOML also wants DEL escaped.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007F")


def _manifest(run_dir: Path) -> Manifest:
    try:
        data = orjson.loads((run_dir / MANIFEST).read_bytes())
    except FileNotFoundError:
        return {}
    except (OSError, orjson.JSONDecodeError) as exc:
        raise OutputError(f"{run_dir / MANIFEST}: unreadable manifest: {exc}") from None
    return cast(Manifest, data) if isinstance(data, dict) else {}


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from exc
