"""The `regen` command line: parse argv, load config, draw progress, map errors to exit codes. No logic here.

A composition root: `run`, `preflight` and `init` are handed the embedded simulator (`pipeline.sim.embedded`) that
serves an endpoint `url = "sim"`; the engine and preflight do not import the simulator."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from .config import Config, check_api_keys, check_endpoints, load_config, with_endpoints
from .engine.logs import configure as configure_logs
from .engine.logs import json_configured
from .errors import InputError, Interrupted, RegenError

EPILOG = "Exit codes: 0 done, 1 problem found, 2 bad config or input, 3 no usable endpoint, 4 locked, 130 interrupted."


def _set(p: argparse.ArgumentParser, help: str = "override one config key") -> None:
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=help)


def _args_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="TOML config file")
    p.add_argument("--input", help="override input.path")
    p.add_argument("--output", help="override output.dir (the RUN_DIR)")
    p.add_argument("--endpoint", action="append", default=[], metavar="URL", help="replace the config's endpoints")
    p.add_argument("--limit", type=int, help="stop after N more prompts reach shards or rejects")
    p.add_argument("--worker-index", type=int, help="this worker's index (default $SLURM_ARRAY_TASK_ID or 0)")
    p.add_argument("--num-workers", type=int, help="number of workers (default $SLURM_ARRAY_TASK_COUNT or 1)")
    p.add_argument("--retry-rejects", action="store_true", help="re-attempt ids that are in rejects")
    p.add_argument(
        "--move-foreign", action="store_true", help="move files regen did not write out of shards/ and rejects/"
    )
    p.add_argument("--allow-config-change", action="store_true", help="resume despite a changed generation config")
    p.add_argument("--skip-preflight", action="store_true", help="do not check endpoints against [expect]")
    p.add_argument("--only-ids", type=Path, metavar="FILE", help="send only these ids, one a line (audit --ids-out)")
    _set(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar (progress lines on the log instead)")
    p.add_argument("--log-format", choices=["text", "json"], default="text", help="json: one JSON object a line")
    p.add_argument("--log-level", choices=["debug", "info", "warning"], default="info", help="debug adds commits")
    p.add_argument(
        "--metrics-port", type=int, metavar="PORT", help="serve Prometheus metrics here (output.metrics_port)"
    )


def _args_preflight(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="TOML config file")
    p.add_argument("--endpoint", action="append", default=[], metavar="URL", help="check these instead")
    p.add_argument("--no-probe", action="store_true", help="skip the live thinking probe")
    _set(p)
    p.add_argument("--json", action="store_true")


def _args_launch(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="TOML config file")
    p.add_argument("--dry-run", action="store_true", help="print the argv and the script; write and start nothing")
    p.add_argument(
        "--script", type=Path, metavar="FILE", help="write the script here (default ./launch.sh; none on --dry-run)"
    )
    _set(p)


def _args_status(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path)
    p.add_argument("--json", action="store_true")


def _args_inspect(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path)
    p.add_argument("--sample", type=int, default=5, metavar="N")
    p.add_argument("--seed", type=int, default=0, metavar="S")
    p.add_argument("--shard", help="only this shard file name")
    p.add_argument("--reason", help="sample rejects with this reason")
    p.add_argument("--endpoint", help="only rows from this endpoint")
    p.add_argument("--where", help='a column condition, e.g. "completion_tokens > 1000"')
    p.add_argument("--html", type=Path, metavar="FILE", help="write a self-contained HTML report")
    p.add_argument("--json", action="store_true")


def _args_validate(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path)
    _set(p, "override a validate.* threshold")
    p.add_argument("--quarantine", action="store_true", help="move failing rows into rejects")
    p.add_argument("--json", action="store_true")


def _args_export(p: argparse.ArgumentParser) -> None:
    from .dataset.exporters import NAMES  # the registry of export formats (light: no writer is imported)

    p.add_argument("run_dir", type=Path)
    p.add_argument("--format", required=True, choices=NAMES)
    p.add_argument("--out", required=True, type=Path, metavar="DIR")
    p.add_argument("--file-format", choices=["parquet", "jsonl"], default="parquet")
    p.add_argument("--rows-per-file", type=int, default=100_000)
    p.add_argument(
        "--reasoning",
        choices=["field", "inline", "none"],
        help="reasoning_content field (default; sharegpt: inline), <think> block in the content, or dropped",
    )
    p.add_argument(
        "--expand-turns", action="store_true", help="one row per generated assistant turn (history without reasoning)"
    )
    p.add_argument("--think-open", default="<think>", help="tag before the reasoning with --reasoning inline")
    p.add_argument("--think-close", default="</think>", help="tag after the reasoning with --reasoning inline")
    p.add_argument("--tokenizer", type=Path, metavar="DIR", help="tokenized: a local tokenizer folder")
    p.add_argument("--chat-template", type=Path, metavar="FILE", help="tokenized: a Jinja chat template file")
    p.add_argument("--include-rejects", action="store_true", help="also export rejected rows (separately)")
    p.add_argument("--license", help="the card's license (a Hub license id, e.g. apache-2.0)")
    p.add_argument("--language", action="append", default=[], metavar="CODE", help="the card's language (repeatable)")
    p.add_argument("--push-to-hub", metavar="ORG/NAME", help="then upload the folder as a Hub dataset (HF_TOKEN)")
    p.add_argument("--private", action="store_true", help="with --push-to-hub: create the repository private")
    p.add_argument(
        "--allow-simulated", action="store_true", help="with --push-to-hub: publish a run of the simulator anyway"
    )
    p.add_argument("--original", metavar="PATH", help="repaired: the dataset the run read (default: its input.path)")
    p.add_argument("--on-reject", choices=["keep", "drop"], default="keep", help="repaired: rows rejected again")
    p.add_argument(
        "--partial", action="store_true", help="export even if committed parts are damaged (the card lists them)"
    )


def _args_audit(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", nargs="?", help="dataset file, folder or glob (default: the config's input.path)")
    p.add_argument("--config", help="read [input], generation.thinking and [validate] from this config")
    p.add_argument("--messages-field", help="the conversation field (default auto: messages or conversations)")
    p.add_argument("--format", choices=["auto", "jsonl", "parquet", "datasets"], help="input format (default auto)")
    p.add_argument("--id-field", help="the id field (default id)")
    p.add_argument(
        "--thinking", action=argparse.BooleanOptionalAction, help="expect reasoning in every turn (default on)"
    )
    p.add_argument("--by", metavar="COLUMN", help="also count failures by this column, e.g. source")
    p.add_argument("--examples", type=int, default=3, metavar="N", help="examples per reason (default 3)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="which examples are shown")
    _set(p, "override a config key, e.g. validate.max_repetition=0.5")
    p.add_argument("--ids-out", type=Path, metavar="FILE", help="write the failing ids here, one a line")
    p.add_argument("--html", type=Path, metavar="FILE", help="write a self-contained HTML report")
    p.add_argument("--json", action="store_true")


def _args_init(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", help="dataset file, folder or glob (its first rows are read)")
    p.add_argument("--endpoint", action="append", default=[], metavar="URL", help="the servers (asked what they serve)")
    p.add_argument("--out", type=Path, metavar="FILE", help="write the config here (default: stdout)")


def _args_merge(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path)
    p.add_argument("--target-rows", type=int, default=10_000, metavar="N")
    p.add_argument("--rejects", action="store_true", help="merge rejects/ too")


_SUBCOMMANDS: list[tuple[str, str, Callable[[argparse.ArgumentParser], None]]] = [
    ("run", "generate (or resume) completions for a config", _args_run),
    ("preflight", "check endpoints against [expect] before spending GPU time", _args_preflight),
    ("launch", "start the SGLang server a config expects, then preflight it", _args_launch),
    ("status", "progress of a RUN_DIR (works while it runs)", _args_status),
    ("inspect", "quality stats and random samples of a RUN_DIR", _args_inspect),
    ("validate", "re-run the validators over committed shards", _args_validate),
    ("export", "training data in the shape a trainer reads (chat, specforge, TRL, tokenized) + card", _args_export),
    ("audit", "measure an existing dataset's assistant turns with the run's validators", _args_audit),
    ("merge", "combine small shards into shards of a target size", _args_merge),
    ("init", "write a commented config for a dataset and its servers, every line to check marked", _args_init),
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="regen", description="Batch completion generation for thinking-mode LLM datasets.", epilog=EPILOG
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help, add_args in _SUBCOMMANDS:
        add_args(sub.add_parser(name, help=help, epilog=EPILOG))
    # The simulator's flags are its own parser, built only for `regen sim` (it imports the whole simulator).
    sub.add_parser("sim", help="run the SGLang simulator (regen sim --help for its flags)", add_help=False)
    return parser


class _Version(argparse.Action):
    """--version, looked up only when asked: reading the installed metadata costs ~10 ms of every command's start."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        sys.stdout.write(f"regen {_version()}\n")
        parser.exit()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("regen")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def sim_parser() -> argparse.ArgumentParser:
    from .sim import add_arguments

    parser = argparse.ArgumentParser(prog="regen sim", description="An SGLang server simulator (docs/simulator.md).")
    add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    own_process = argv is None  # the console script, not a caller's interpreter
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sim"]:
        args = sim_parser().parse_args(argv[1:])
        args.command = "sim"
    else:
        args = build_parser().parse_args(argv)
    if own_process and args.command in READS_RUN_FILES:
        from .engine.memory import use_run_pools

        use_run_pools()
    try:
        return int(COMMANDS[args.command](args) or 0)
    except Interrupted as exc:
        _say(f"{exc}", logging.WARNING)
        _say(f"resume with: regen {' '.join(shlex.quote(a) for a in argv)}", logging.WARNING)
        return exc.exit_code
    except RegenError as exc:
        _say(f"error: {exc}", logging.ERROR)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `regen inspect RUN | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # what a shell reports for a command killed by SIGPIPE


def _run_dir(path: Path) -> Path:
    """The RUN_DIR of status, inspect, validate, export and merge must be one (exit 2), not a typo read as zeros."""
    from .store.layout import MANIFEST, MARKS, RunLayout
    from .store.remote import local_copy

    path = local_copy(path)  # s3://bucket/run: its local working copy, up to date with the bucket (store/remote.py)
    if not path.exists():
        raise InputError(f"{path}: no such run directory")
    if not RunLayout(path).is_run_dir():
        marks = [MANIFEST] + [f"{name}/" for name in MARKS[1:]]
        raise InputError(f"{path}: not a run directory (no {', no '.join(marks)})")
    return path


def _print_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2, default=str).decode() + "\n")


def cmd_run(args: argparse.Namespace) -> int:
    bar = not args.no_progress and sys.stderr.isatty()  # a bar's \r frames only on a terminal, never in a file
    configure_logs(args.log_format, args.log_level, progress_lines=not bar)
    from .engine.memory import tuned_for_run

    with tuned_for_run():
        return _run(args, bar)


def _run(args: argparse.Namespace, bar: bool) -> int:
    from .dataset.audit import read_ids
    from .engine.runner import RunOptions, run, worker_from_env
    from .sim import embedded  # the composition root serves `url = "sim"`; the engine does not import the simulator

    overrides = list(args.set)
    if args.output:
        overrides.append(f"output.dir={orjson.dumps(args.output).decode()}")
    if args.metrics_port is not None:
        overrides.append(f"output.metrics_port={args.metrics_port}")
    required = () if args.input else ("input.path",)  # a relative default path is never what a real run means
    cfg = with_endpoints(load_config(args.config, overrides, required=required), args.endpoint)
    check_endpoints(cfg, args.config)
    check_api_keys(cfg, args.config)
    index, count = worker_from_env(args.worker_index, args.num_workers)
    options = RunOptions(
        worker_index=index,
        num_workers=count,
        limit=args.limit,
        retry_rejects=args.retry_rejects,
        move_foreign=args.move_foreign,
        allow_config_change=args.allow_config_change,
        skip_preflight=args.skip_preflight,
        input_path=args.input,
        only_ids=read_ids(args.only_ids) if args.only_ids else None,
    )
    from .engine.progress import Progress

    with Progress(enabled=bar, limit=args.limit) as progress:
        try:
            summary = run(cfg, options, on_progress=progress.update, simulator=embedded)
        except Interrupted as exc:  # the counts so far, then the resume hint (main)
            if exc.summary is not None:
                done: Any = exc.summary
                progress.close()
                progress.print_summary(done.metrics, done.run_dir, as_log=args.log_format == "json")
            raise
        progress.update(summary.metrics)  # the last frame: 100%, not where the last tick left it
    progress.print_summary(summary.metrics, summary.run_dir, as_log=args.log_format == "json")
    for move in summary.set_aside:
        _say(f"set aside {move['from']} -> {move['to']} ({move['problem']}); its ids are pending again")
    if summary.refused_all:
        _say("error: every row was refused (bad_input): the config does not read this dataset", logging.ERROR)
        return InputError.exit_code
    return 0


def _say(message: str, level: int = logging.INFO) -> None:
    """A message to the user on stderr: a log record when the log is JSON (every line one object), else a line."""
    if json_configured():
        logging.getLogger("regen.cli").log(level, message)
    else:
        print(f"regen: {message}", file=sys.stderr)


def cmd_preflight(args: argparse.Namespace) -> int:
    from .server.preflight import format_preflight, preflight
    from .sim import embedded

    cfg = with_endpoints(load_config(args.config, args.set), args.endpoint)
    check_endpoints(cfg, args.config)
    check_api_keys(cfg, args.config)
    tools = _input_has_tools(cfg)
    urls, probe = args.endpoint or None, not args.no_probe
    result = asyncio.run(preflight(cfg, urls=urls, probe=probe, tools=tools, simulator=embedded))
    _print_json(result) if args.json else print(format_preflight(result))
    return 0 if result["ok"] else 1


def _input_has_tools(cfg: Config) -> bool:
    """Whether the config's input (its first rows, as `regen run` reads them) carries tools; False when there is no
    input to read (preflight checks servers, not data)."""
    from .engine.refusals import FIRST_ROWS
    from .inputs.reader import PromptReader, first_rows_have_tools

    if not cfg.input.path:
        return False
    try:
        reader = PromptReader(cfg.input, generation=cfg.generation, validate=cfg.validate)
        return first_rows_have_tools(reader, FIRST_ROWS)
    except RegenError:
        return False


def cmd_launch(args: argparse.Namespace) -> int:
    from .server.launch import format_launch, launch

    result = asyncio.run(launch(load_config(args.config, args.set), dry_run=args.dry_run, script=args.script))
    print(format_launch(result))
    return 0 if result["ok"] else 1


def cmd_status(args: argparse.Namespace) -> int:
    from .inspection import format_status, run_status

    status = run_status(_run_dir(args.run_dir))
    _print_json(status) if args.json else print(format_status(status))
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from .inspection import format_inspect, inspect_run, write_html

    report = inspect_run(
        _run_dir(args.run_dir),
        sample=args.sample,
        seed=args.seed,
        shard=args.shard,
        reason=args.reason,
        endpoint=args.endpoint,
        where=args.where,
    )
    if args.html:
        write_html(report, args.html)
    if args.json:
        _print_json(report)
    elif args.html:  # the report is in the file; the terminal gets where, not the whole text report again
        print(f"wrote {args.html} ({report['rows']:,} rows, {len(report['sample'])} samples)")
    else:
        print(format_inspect(report))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from .inspection import format_validate, validate_run

    cfg = None
    if args.set:
        cfg = load_config(None, [s if s.startswith("validate.") else f"validate.{s}" for s in args.set]).validate
    result = validate_run(_run_dir(args.run_dir), cfg, quarantine=args.quarantine)
    _print_json(result) if args.json else print(format_validate(result))
    problems = result["damaged"] or result["duplicates"]["count"]
    return 1 if problems or (result["failed"] and not args.quarantine) else 0


def cmd_export(args: argparse.Namespace) -> int:
    from .dataset.card import CardOptions
    from .dataset.exporters import RepairExporter, exporter_for

    exporter = exporter_for(args.format)
    options = exporter.options_from({**vars(args), "card": CardOptions(args.license, tuple(args.language))})
    run_dir = _run_dir(args.run_dir)
    if isinstance(exporter, RepairExporter):  # the original dataset written back: a report of another shape
        return _said_repaired(exporter.export(run_dir, args.out, options), args)
    if args.push_to_hub:
        from .dataset.hub import refuse_simulated

        refuse_simulated(run_dir, allow=args.allow_simulated)  # before the export's work, not after it
    result = exporter.export(run_dir, args.out, options)
    print(f"exported {result['rows']} rows ({args.format}) to {args.out} in {len(result['files'])} files")
    for note in result["damaged"]:
        _say(f"warning: partial export: rows missing from the damaged part {note}", logging.WARNING)
    for reason, n in result["skipped"].items():
        print(f"left out {n} rows the format's consumer would refuse: {reason}")
    print(f"dataset card: {result['card']}")
    if args.push_to_hub:
        from .dataset.hub import push_to_hub

        url = push_to_hub(args.out, args.push_to_hub, private=args.private)
        print(f"uploaded to {url}")
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from .dataset.audit import audit_dataset, format_audit
    from .inputs.row_audit import AuditOptions

    cfg = load_config(args.config, args.set)
    given = {"format": args.format, "messages_field": args.messages_field, "id_field": args.id_field}
    opts = AuditOptions.from_config(
        cfg, **given, thinking=args.thinking, by=args.by, seed=args.seed, examples=args.examples
    )
    report = audit_dataset(args.path or cfg.input.path, opts, ids_out=args.ids_out)
    if args.html:
        from .inspection.audit_page import write_audit_html

        write_audit_html(report, args.html)
    _print_json(report) if args.json else print(format_audit(report))
    return 1 if report["failing_rows"] else 0


def _said_repaired(r: dict[str, Any], args: argparse.Namespace) -> int:
    """What `regen export --format repaired` prints of its report."""
    for note in r["damaged"]:
        _say(f"warning: partial export: regenerated rows missing from the damaged part {note}", logging.WARNING)
    print(f"wrote {r['rows']} rows to {args.out} in {len(r['files'])} files: {r['repaired']} repaired, ", end="")
    print(f"{r['rejected_kept'] + r['dropped']} rejected again ({args.on_reject}), {r['left']} as they were")
    if r["repeats"]:
        print(f"{r['repeats']} of the regenerated rows repeat an earlier row (input.dedupe): each copy as the first")
    print(
        f"not pasted (kept as they are): {r['changed']} changed since the run, {r['passes_now']} passing the audit "
        f"now, {r['duplicate']} repeated ids with another conversation; {r['unplaced']} regenerated rows have no "
        "row in the original"
    )
    if r["unchecked"]:
        print(f"{r['unchecked']} rows pasted unchecked: the run is older than regen's input_fingerprint")
    print(f"report: {args.out / 'repair-report.json'}; rows to look at: {args.out / r['listed']}")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from .store.merge import merge_run

    result = merge_run(_run_dir(args.run_dir), target_rows=args.target_rows, rejects=args.rejects)
    if not result["merged"]:
        n, target = result["before_files"], args.target_rows
        print(f"nothing to merge: {n} files, already as few as --target-rows {target} allows")
        return 0
    print(f"merged {result['rows']} rows: {result['before_files']} files -> {result['after_files']} files")
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    from .engine.init_config import MARK, init_config
    from .sim import embedded

    if args.out is not None and args.out.exists():
        raise InputError(f"{args.out} exists; remove it or choose another --out")
    result = init_config(args.dataset, args.endpoint, simulator=embedded)
    for note in result.notes:
        _say(f"note: {note}")
    if args.out is None:
        sys.stdout.write(result.text)
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(result.text)
    checks = sum(MARK in line for line in result.text.splitlines())
    _say(f"wrote {args.out}: read the {checks} lines marked '{MARK}', then: regen run {args.out} --limit 20")
    return 0


def cmd_sim(args: argparse.Namespace) -> int:
    from .sim import config_from_args, run_forever

    asyncio.run(run_forever(config_from_args(args)))
    return 0


# Commands that read a run's (or a dataset's) Parquet files: in their own process, on the run's Arrow pools.
READS_RUN_FILES = frozenset({"status", "inspect", "validate", "export", "audit", "merge"})
COMMANDS = {
    "run": cmd_run,
    "preflight": cmd_preflight,
    "launch": cmd_launch,
    "status": cmd_status,
    "inspect": cmd_inspect,
    "validate": cmd_validate,
    "export": cmd_export,
    "audit": cmd_audit,
    "merge": cmd_merge,
    "init": cmd_init,
    "sim": cmd_sim,
}
