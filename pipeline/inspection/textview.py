"""Terminal renderings of the status, inspect and validate reports: wrapped, aligned, long texts elided."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .status import RunStatus

PROMPT_CHARS = 600
REASONING_HEAD = 400
REASONING_TAIL = 400
ANSWER_CHARS = 1200


def elide(text: str, head: int, tail: int) -> str:
    """`text` if short, else its head and tail around a marker that says how much was cut."""
    if len(text) <= head + tail + 40:
        return text
    cut = len(text) - head - tail
    return f"{text[:head]} … [{cut:,} chars elided] … {text[-tail:]}"


def wrap(text: str, width: int, indent: str = "    ") -> str:
    lines: list[str] = []
    for para in text.splitlines() or [""]:
        filled = textwrap.wrap(para, width=max(20, width - len(indent)), replace_whitespace=False)
        lines.extend(indent + line for line in filled or [""])
    return "\n".join(lines)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _num(x: float | int | None, digits: int = 0) -> str:
    if x is None:
        return "-"
    return f"{x:,.{digits}f}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return "\n".join([fmt.format(*headers), fmt.format(*("-" * w for w in widths))] + [fmt.format(*r) for r in rows])


def repetition_lines(rep: dict[str, Any] | None) -> list[str]:
    """Accepted rows that keep a repetition the model ended itself (kept on purpose; validate.reject_looping)."""
    if not rep or not rep.get("rows"):
        return []
    return [
        f"kept repetition: {rep['rows']:,} of {rep['measured']:,} accepted rows ({_pct(rep['share'])}) repeat a unit "
        f"the model then ended (longest run {rep['longest_chars']:,} chars; repetition_chars)"
    ]


def format_status(status: RunStatus) -> str:
    total = status["total"]
    done = status["done"]
    head = f"{done:,}/{total:,} done ({done / total:.1%})" if total else f"{done:,} done (total unknown)"
    rates = status["rates"]
    lines = [
        f"run {status['run_dir']}: {head}, {status['pending'] if total else '?'} pending, "
        f"{status['in_journal']:,} in journals (not yet in shards)",
        f"accepted {status['accepted']:,}  rejected {status['rejected']:,} ({_pct(status['reject_rate'])})",
    ]
    for reason, n in status["rejected_by_reason"].items():
        lines.append(f"    {reason:<22} {n:>10,}")
    lines += simulated_lines(status)
    lines += _worker_lines(status.get("workers") or [])
    lines.append(
        f"rate: recent {rates['recent_completions_per_s']:.2f}/s {rates['recent_output_tokens_per_s']:,.0f} tok/s; "
        f"overall {rates['completions_per_s']:.2f}/s {rates['output_tokens_per_s']:,.0f} tok/s "
        f"(from {rates['source']});  ETA {_duration(status['eta_s'])}"
    )
    if status["endpoints"]:
        rows = [
            [
                url,
                _num(ep.get("accepted")),
                _num(ep.get("rejected")),
                _pct(ep.get("reject_rate")),
                _num(ep.get("inflight")),
                _num(ep.get("errors")),
                _num(ep.get("latency_p50"), 2),
                _num(ep.get("latency_p99"), 2),
            ]
            for url, ep in status["endpoints"].items()
        ]
        headers = ["endpoint", "accepted", "rejected", "rej%", "inflight", "errors", "lat p50", "lat p99"]
        lines += ["", table(headers, rows)]
    lines += server_lines(status.get("servers") or {})
    lines += spec_lines(status.get("spec_accept_length"))
    lines += repetition_lines(status.get("repetition"))
    if status["last_errors"]:
        lines += ["", "last errors:"] + [f"    {err}" for err in status["last_errors"]]
    return "\n".join(lines + store_problems(status))


def server_lines(servers: dict[str, dict[str, Any]]) -> list[str]:
    """What each server says of itself (its /metrics or /v1/loads, read by the run): one row per server."""
    if not servers:
        return []
    rows = []
    for url, v in servers.items():
        if v.get("read_at") is None:
            rows.append([url, "-", "-", "-", "-", "-", "-", v.get("error") or "not read yet"])
            continue
        running = _num(v.get("running"))
        if v.get("capacity"):
            running += f"/{v['capacity']:,}"
        read = f"{_duration(v.get('age_s'))} ago" + (" (stale)" if v.get("stale") else "")
        source = f"{v.get('kind')} {v.get('source')}"
        rows.append([url, running, _num(v.get("queued")), _pct(v.get("kv_usage")), _num(v.get("gen_tokens_per_s")),
                     _num(v.get("spec_accept_length"), 2), read, source])  # fmt: skip
    headers = ["server (its own figures)", "running", "queued", "KV use", "gen tok/s", "accept", "read", "from"]
    return ["", table(headers, rows)]


def _worker_lines(workers: list[dict[str, Any]]) -> list[str]:
    """One line per worker's heartbeat, and "no live worker" when none is alive."""
    lines = [
        f"worker {w['worker']}: {w['host']} pid {w['pid']}, heartbeat {_duration(w['heartbeat_age_s'])} ago, "
        + ("live" if w["live"] else f"not live ({w['state']})")
        for w in workers
    ]
    if workers and not any(w["live"] for w in workers):
        ended = all(w["state"] in ("finished", "interrupted") for w in workers)
        lines.append("no live worker" + ("" if ended else ": the run is not running (rerun `regen run` to resume)"))
    return lines


def simulated_lines(result: Mapping[str, Any]) -> list[str]:
    """The line that says regen's simulator wrote the rows (empty for a run of real servers)."""
    if not result.get("simulated"):
        return []
    sims = ", ".join(result["simulated_endpoints"])
    return [f"SIMULATED: the simulator ({sims}) served this run: its rows are filler text, not model output"]


def store_problems(result: Mapping[str, Any]) -> list[str]:
    """Lines about damaged committed files and ids committed twice (empty when there are none)."""
    lines = [f"DAMAGED: {d} (skipped; `regen run` sets it aside and regenerates its ids)" for d in result["damaged"]]
    dups = result["duplicates"]
    if dups["count"]:
        lines.append(f"DUPLICATES: {dups['count']:,} ids are committed more than once (a resume settles them)")
        lines += [f"    {x['id']}: {', '.join(x['files'])}" for x in dups["examples"][:5]]
    return lines


def format_inspect(report: dict[str, Any], width: int = 100) -> str:
    out = [_inspect_head(report)]
    out.append(_percentile_table(report))
    out.append(_problem_lines(report))
    for kind in ("per_shard", "per_endpoint"):
        if report[kind]:
            out.append(_group_table(kind.removeprefix("per_"), report[kind]))
    out += spec_tables(report.get("spec_accept_length"))
    if report["warnings"] or report["flagged"]:
        lines = ["attention:"] + [f"  ! {w}" for w in report["warnings"]]
        lines += [f"  ! {f['kind']} {f['name']}: {'; '.join(f['flags'])}" for f in report["flagged"]]
        out.append("\n".join(lines))
    for i, row in enumerate(report["sample"], 1):
        out.append(format_sample(row, i, len(report["sample"]), width))
    return "\n\n".join(out)


def _inspect_head(r: dict[str, Any]) -> str:
    active = {k: v for k, v in r["filters"].items() if v is not None}
    lines = [
        f"run {r['run_dir']}: {r['rows']:,} rows in {r['files']} files" + (f" (filters: {active})" if active else ""),
        f"accepted {r['accepted']:,}  rejected {r['rejected']:,} ({_pct(r['reject_rate'])})",
    ]
    journal = r.get("journal") or {}
    if journal.get("accepted") or journal.get("rejected"):
        lines.append(
            f"including {journal['accepted']:,} accepted and {journal['rejected']:,} rejected rows still in the "
            "journals (not yet in shards: labelled journal/...)"
        )
    lines += simulated_lines(r)
    lines += [f"DAMAGED: {d} (skipped)" for d in r["damaged"]]
    lines += [f"    {k:<22} {v:>10,}" for k, v in r["rejected_by_reason"].items()]
    lines.append("finish reasons: " + (", ".join(f"{k} {v:,}" for k, v in r["finish_reasons"].items()) or "none"))
    return "\n".join(lines)


def _percentile_table(r: dict[str, Any]) -> str:
    keys = ["p1", "p10", "p50", "p90", "p99", "max"]
    rows = [
        [name] + [_num(p.get(k), 2 if name == "reasoning_answer_ratio" else 0) for k in keys]
        for name, p in r["percentiles"].items()
        if p["count"]
    ]
    return f"lengths ({r['percentiles_of']} rows)\n" + table(["", *keys], rows)


def _problem_lines(r: dict[str, Any]) -> str:
    dup, rep, short, empty = r["duplicates_answers"], r["repetition"], r["short_answers"], r["empty_answers"]
    lines = [
        f"empty answers (accepted): {empty['rows']:,} ({_pct(empty['rate'])}) {_ids(empty['examples'])}",
        f"short answers (< {short['threshold_bytes']} bytes): {short['rows']:,} ({_pct(short['rate'])}) "
        f"{_ids(short['examples'])}",
        f"looping (degenerate repetition): {rep['rows']:,} ({_pct(rep['rate'])} of {_checked(rep)}) "
        f"{_ids(rep['examples'])}",
        f"answers shared by {dup['min_prompts']}+ prompts: {dup['rows']:,} ({_pct(dup['rate'])})",
    ]
    lines += [f"    {d['count']:>6,} x {d['answer']!r} (e.g. {d['example_id']})" for d in dup["top"][:5]]
    return "\n".join(lines)


def _checked(rep: dict[str, Any]) -> str:
    return "all rows checked" if rep["checked"] == rep["of"] else f"checked {rep['checked']:,} of {rep['of']:,} rows"


def _ids(ids: list[str]) -> str:
    return f"e.g. {', '.join(ids[:3])}" if ids else ""


def _group_table(kind: str, groups: dict[str, dict[str, Any]]) -> str:
    headers = [kind, "rows", "rej%", "empty%", "loop%", "short%", "shared%", "trunc%", "tok p50", "flag"]
    rows = [
        [
            name,
            f"{g['rows']:,}",
            _pct(g["reject_rate"]),
            _pct(g["empty_answer_rate"]),
            _pct(g["repetition_rate"]),
            _pct(g["short_rate"]),
            _pct(g["shared_rate"]),
            _pct(g["truncated_rate"]),
            _num(g["completion_tokens_p50"]),
            "!" if g["flags"] else "",
        ]
        for name, g in groups.items()
    ]
    return table(headers, rows)


def format_sample(row: dict[str, Any], i: int, n: int, width: int) -> str:
    head = (
        f"── sample {i}/{n}  id={row['id']}  {row['file']}  endpoint={row['endpoint']}  "
        f"finish={row['finish_reason']}  tokens: prompt {_num(row['prompt_tokens'])}, "
        f"completion {_num(row['completion_tokens'])}, reasoning {_num(row['reasoning_tokens'])}"
    )
    lines = [textwrap.fill(head, width=width, subsequent_indent="   ")]
    if row.get("reason"):
        lines.append(wrap(f"rejected: {row['reason']}: {row.get('detail') or ''}", width, "  "))
    if row.get("conversation"):
        return "\n".join(lines + _conversation_lines(row["conversation"], width))
    reasoning, answer = row["reasoning"], row["answer"]
    lines.append(f"  prompt ({len(row['prompt']):,} chars):")
    lines.append(wrap(elide(row["prompt"], PROMPT_CHARS // 2, PROMPT_CHARS // 2), width))
    lines.append(f"  reasoning ({len(reasoning):,} chars):")
    lines.append(wrap(elide(reasoning, REASONING_HEAD, REASONING_TAIL), width))
    lines.append(f"  answer ({len(answer):,} chars):")
    lines.append(wrap(elide(answer, ANSWER_CHARS // 2, ANSWER_CHARS // 2), width))
    return "\n".join(lines)


def _conversation_lines(conv: list[dict[str, Any]], width: int) -> list[str]:
    """Every turn of a multi-turn sample, in order: what was asked, and each assistant turn's reasoning and answer."""
    lines = []
    for n, m in enumerate(conv, 1):
        tag = " (regenerated)" if m.get("generated") else ""
        lines.append(f"  [{n}] {m['role']}{tag} ({len(m['content']):,} chars):")
        if m.get("reasoning"):
            lines.append(f"      reasoning ({len(m['reasoning']):,} chars):")
            lines.append(wrap(elide(m["reasoning"], REASONING_HEAD // 2, REASONING_TAIL // 2), width, "      "))
        limit = ANSWER_CHARS if m["role"] == "assistant" else PROMPT_CHARS
        lines.append(wrap(elide(m["content"], limit // 2, limit // 2), width, "      "))
    return lines


def format_validate(result: dict[str, Any]) -> str:
    lines = [
        f"validated {result['rows']:,} committed rows in {result['files']} shards: "
        f"{result['failed']:,} fail ({_pct(result['failed'] / result['rows'] if result['rows'] else 0.0)})"
    ]
    lines += [f"    {k:<22} {v:>10,}" for k, v in result["failed_by_reason"].items()]
    for shard, n in result["failed_by_shard"].items():
        lines.append(f"    {shard}: {n:,} failing")
    lines += [f"    e.g. {x['id']}: {x['reason']}: {x['detail']}" for x in result["examples"][:3]]
    if result["quarantine"]:
        lines.append(
            f"quarantined {result['quarantined']:,} rows into rejects/ "
            f"({result['repaired']:,} left over from an interrupted quarantine removed from shards)"
        )
    elif result["failed"]:
        lines.append("run with --quarantine to move them into rejects/")
    return "\n".join(lines + store_problems(result))


# ---------------------------------------------------------------- the server's speculative acceptance (issue 36)

SPEC_UNIT = "tokens per verify step, the bonus token included"
SPEC_NONE = "no speculative decoding, or a server release that does not report it per request"


def spec_figures(s: dict[str, Any]) -> str:
    """`mean 2.81 (p10 2.10 .. p90 3.50)` of a store/acceptance summary with a figure."""
    return f"mean {s['mean']:.2f} (p10 {s['p10']:.2f} .. p90 {s['p90']:.2f})"


def spec_lines(spec: dict[str, Any] | None) -> list[str]:
    """`regen status`: the acceptance over the accepted turns so far, and per endpoint when there are several."""
    if not spec or not spec["turns"]:
        return []
    if not spec["reported"]:
        return [f"speculative acceptance: none reported in {spec['turns']:,} turns ({SPEC_NONE})"]
    lines = [
        f"speculative acceptance ({SPEC_UNIT}): mean {spec['mean']:.2f}, p10 {spec['p10']:.2f}, "
        f"p50 {spec['p50']:.2f}, p90 {spec['p90']:.2f}, weighted {_num(spec['weighted'], 2)}; "
        f"{spec['reported']:,} of {spec['turns']:,} turns reported"
    ]
    groups = spec.get("by_endpoint") or {}
    if len(groups) > 1:
        for url, g in groups.items():
            figures = spec_figures(g) if g["reported"] else "none reported"
            lines.append(f"    {url or '(none)'}: {figures}; {g['reported']:,} of {g['turns']:,} turns")
    return lines


def spec_tables(spec: dict[str, Any] | None) -> list[str]:
    """`regen inspect`: the acceptance overall and by shard, endpoint, turn index and output length."""
    if not spec or not spec["overall"]["turns"]:
        return []
    overall = spec["overall"]
    if not overall["reported"]:
        return [f"speculative acceptance: none reported in {overall['turns']:,} turns ({SPEC_NONE})"]
    head = f"speculative acceptance ({SPEC_UNIT}; {spec['of']} rows, one per generated turn)"
    out = [head + "\n" + _spec_table("", {"all": overall})]
    for kind, title in (
        ("by_shard", "shard"),
        ("by_endpoint", "endpoint"),
        ("by_turn", "turn"),
        ("by_length", "tokens"),
    ):
        if len(spec[kind]) > 1 or kind == "by_shard":
            out.append(_spec_table(title, spec[kind]))
    return out


def _spec_table(title: str, groups: dict[str, dict[str, Any]]) -> str:
    headers = [title, "turns", "reported", "mean", "p10", "p50", "p90", "weighted"]
    rows = [
        [name or "(none)", f"{g['turns']:,}", f"{g['reported']:,}"]
        + [_num(g[k], 2) for k in ("mean", "p10", "p50", "p90", "weighted")]
        for name, g in groups.items()
    ]
    return table(headers, rows)
