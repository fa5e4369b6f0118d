"""`regen inspect --html`: the inspect report as one self-contained HTML file (plots inline, no network), in the
look of page.py.

matplotlib (~0.5 s and ~40 MB of imports) loads on the first plot, inside `write_html`, so importing this module
(and `pipeline.inspection`) costs `regen status` and a plain `regen inspect` nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .page import document, escape, figure, histogram, number, png, write_page
from .textview import SPEC_NONE, SPEC_UNIT, elide, simulated_lines

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def write_html(report: dict[str, Any], path: Path) -> None:
    """Write `report` (from inspect_run) to `path` as a single offline HTML page."""
    body = [
        f"<h1>regen inspect: {escape(report['run_dir'])}</h1>",
        *(f'<p class="warn">{escape(line)}</p>' for line in simulated_lines(report)),
        _summary(report),
        "<h2>Plots</h2>",
        '<div class="plots">',
        *(f'<img alt="{escape(name)}" src="data:image/png;base64,{image}">' for name, image in _plots(report)),
        "</div>",
        "<h2>Lengths</h2>",
        _percentiles(report),
        "<h2>Per shard</h2>",
        _groups(report["per_shard"], "file"),
        "<h2>Per endpoint</h2>",
        _groups(report["per_endpoint"], "endpoint"),
        _speculative(report.get("spec_accept_length")),
        "<h2>Sample</h2>",
        *(_sample(row) for row in report["sample"]),
    ]
    write_page(Path(path), document("regen inspect", body))


def _summary(r: dict[str, Any]) -> str:
    items = [
        f"<li>{r['rows']:,} rows in {r['files']} files: {r['accepted']:,} accepted, {r['rejected']:,} rejected "
        f"({r['reject_rate']:.1%})</li>",
        f"<li>rejected by reason: {escape(_counts(r['rejected_by_reason']))}</li>",
        f"<li>finish reasons: {escape(_counts(r['finish_reasons']))}</li>",
        f"<li>empty answers: {r['empty_answers']['rows']:,}; short answers (&lt; "
        f"{r['short_answers']['threshold_bytes']} bytes): {r['short_answers']['rows']:,}; looping: "
        f"{r['repetition']['rows']:,} (checked {r['repetition']['checked']:,} of {r['repetition']['of']:,} rows); "
        f"answers shared by {r['duplicates_answers']['min_prompts']}+ prompts: "
        f"{r['duplicates_answers']['rows']:,}</li>",
    ]
    items += [f'<li class="warn">{escape(w)}</li>' for w in r["warnings"]]
    items += [
        f'<li class="warn">{escape(f["kind"])} {escape(f["name"])}: {escape("; ".join(f["flags"]))}</li>'
        for f in r["flagged"]
    ]
    active = {k: v for k, v in r["filters"].items() if v is not None}
    if active:
        items.append(f"<li>filters: {escape(active)}</li>")
    return "<ul>" + "".join(items) + "</ul>"


def _counts(counts: dict[str, int]) -> str:
    """`reason n, ...`, or "none" for no rows (a label with nothing after it reads as a broken page)."""
    return ", ".join(f"{k} {v:,}" for k, v in counts.items()) or "none"


def _percentiles(r: dict[str, Any]) -> str:
    keys = ["count", "p1", "p10", "p50", "p90", "p99", "mean", "max"]
    rows = [
        "<tr><td>"
        + escape(name)
        + "</td>"
        + "".join(f'<td class="n">{_count(name, p.get(k))}</td>' for k in keys)
        + "</tr>"
        for name, p in r["percentiles"].items()
    ]
    head = "<tr><th></th>" + "".join(f"<th>{k}</th>" for k in keys) + "</tr>"
    return f"<p>over {r['percentiles_of']} rows</p><table>{head}{''.join(rows)}</table>"


def _count(name: str, x: Any) -> str:
    """A percentile of tokens or characters is a whole number (78.77 tokens reads as a bug); a ratio keeps 2 digits."""
    if isinstance(x, float) and name != "reasoning_answer_ratio":
        return f"{round(x):,}"
    return number(x)


_GROUP_COLS = [
    ("rows", "rows"),
    ("reject_rate", "rejected"),
    ("empty_answer_rate", "empty answer"),
    ("repetition_rate", "looping"),
    ("short_rate", "short"),
    ("shared_rate", "shared answer"),
    ("truncated_rate", "truncated"),
    ("completion_tokens_p50", "completion p50"),
]


def _groups(groups: dict[str, dict[str, Any]], kind: str) -> str:
    head = f"<tr><th>{kind}</th>" + "".join(f"<th>{label}</th>" for _, label in _GROUP_COLS) + "<th>flags</th></tr>"
    rows = []
    for name, g in groups.items():
        cells = "".join(
            f'<td class="n">{g[k]:.1%}</td>' if k.endswith("_rate") else f'<td class="n">{number(g[k])}</td>'
            for k, _ in _GROUP_COLS
        )
        cls = ' class="flag"' if g["flags"] else ""
        rows.append(f"<tr{cls}><td>{escape(name)}</td>{cells}<td>{escape('; '.join(g['flags']))}</td></tr>")
    return f"<table>{head}{''.join(rows)}</table>"


def _speculative(spec: dict[str, Any] | None) -> str:
    """The serving model's speculative acceptance: overall, and by shard, endpoint, turn index and output length."""
    if not spec or not spec["overall"]["turns"]:
        return ""
    head = "<h2>Speculative acceptance</h2>"
    if not spec["overall"]["reported"]:
        return f"{head}<p>None reported in {spec['overall']['turns']:,} turns ({escape(SPEC_NONE)}).</p>"
    keys = ("turns", "reported", "mean", "p10", "p50", "p90", "weighted")
    parts = [f"{head}<p>{escape(SPEC_UNIT)}; over {spec['of']} rows, one sample per generated turn.</p>"]
    for kind, title in (("overall", ""), ("by_shard", "shard"), ("by_endpoint", "endpoint"), ("by_turn", "turn"),
                        ("by_length", "completion tokens")):  # fmt: skip
        groups = {"all": spec[kind]} if kind == "overall" else spec[kind]
        rows = "".join(
            f"<tr><td>{escape(name or '(none)')}</td>"
            + "".join(f'<td class="n">{number(g[k])}</td>' for k in keys)
            + "</tr>"
            for name, g in groups.items()
        )
        head_row = f"<tr><th>{escape(title)}</th>" + "".join(f"<th>{k}</th>" for k in keys) + "</tr>"
        parts.append(f"<table>{head_row}{rows}</table>")
    return "".join(parts)


def _sample(row: dict[str, Any]) -> str:
    title = (
        f"{row['id']} · {row['file']} · {row['endpoint']} · finish={row['finish_reason']} · "
        f"completion {row['completion_tokens']} tokens (reasoning {row['reasoning_tokens']})"
    )
    parts = [f"<details open><summary>{escape(title)}</summary>"]
    if row.get("reason"):
        parts.append(f'<p class="warn">rejected: {escape(row["reason"])}: {escape(row.get("detail") or "")}</p>')
    if row.get("conversation"):
        parts += [_turn(n, m) for n, m in enumerate(row["conversation"], 1)]
    else:
        for name, limit in (("prompt", 2000), ("reasoning", 3000), ("answer", 4000)):
            text = row[name]
            parts.append(f"<b>{name}</b> ({len(text):,} chars)<pre>{escape(elide(text, limit // 2, limit // 2))}</pre>")
    parts.append("</details>")
    return "".join(parts)


def _turn(n: int, m: dict[str, Any]) -> str:
    """One message of a multi-turn sample: its role, and for an assistant turn its reasoning and answer."""
    tag = " (regenerated)" if m.get("generated") else ""
    out = [f'<div class="turn"><b>[{n}] {escape(m["role"])}{tag}</b>']
    if m.get("reasoning"):
        text = m["reasoning"]
        out.append(f"<i>reasoning</i> ({len(text):,} chars)<pre>{escape(elide(text, 1000, 1000))}</pre>")
    limit = 4000 if m["role"] == "assistant" else 2000
    out.append(f"<pre>{escape(elide(m['content'], limit // 2, limit // 2))}</pre></div>")
    return "".join(out)


def _plots(r: dict[str, Any]) -> list[tuple[str, str]]:
    plots = []
    colors = {"reasoning_tokens": "#4c72b0", "answer_tokens": "#dd8452", "answer_bytes": "#dd8452"}
    for name, hist in r["histograms"].items():
        title = f"{name.replace('_', ' ')} ({r['percentiles_of']} rows)"
        fig = histogram(hist, title=title, ylabel="rows", color=colors.get(name, "#55a868"))
        fig.axes[0].set_xlabel(name.replace("_", " "))
        plots.append((name, png(fig)))
    plots.append(("rejects over time", png(_timeline(r["timeline"]))))
    plots.append(("per endpoint", png(_endpoint_bars(r["per_endpoint"]))))
    return plots


def _timeline(t: dict[str, Any]) -> Figure:
    import matplotlib
    from matplotlib import dates as mdates

    fig = figure()
    ax = fig.add_subplot()
    ax.set_title("accepted and rejected by reason over time")
    if t["edges"]:
        starts = mdates.date2num([datetime.fromtimestamp(x, UTC) for x in t["edges"][:-1]])  # type: ignore[no-untyped-call]
        width = (t["edges"][1] - t["edges"][0]) / 86400.0
        bottom = [0.0] * len(starts)
        series = [("accepted", t["accepted"]), *t["by_reason"].items()]
        cmap = matplotlib.colormaps["tab10"]
        for i, (name, values) in enumerate(series):
            ax.bar(starts, values, width=width, bottom=bottom, label=name, align="edge", color=cmap(i % 10))
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        ax.xaxis_date()
        ax.legend(fontsize=7)
        fig.autofmt_xdate()
    ax.set_ylabel("rows")
    return fig


def _endpoint_bars(groups: dict[str, dict[str, Any]]) -> Figure:
    fig = figure()
    ax = fig.add_subplot()
    ax.set_title("problem rates per endpoint")
    names = list(groups)
    keys = [("reject_rate", "#c44e52"), ("empty_answer_rate", "#8172b3"), ("repetition_rate", "#937860")]
    for i, (key, color) in enumerate(keys):
        xs = [j + i * 0.27 for j in range(len(names))]
        ax.bar(xs, [groups[n][key] for n in names], width=0.27, label=key.removesuffix("_rate"), color=color)
    ax.set_xticks([j + 0.27 for j in range(len(names))], [n[-24:] for n in names], fontsize=7, rotation=15)
    ax.set_ylabel("share of rows")
    if not any(groups[n][key] for n in names for key, _ in keys):  # all zero: say so, not an empty -0.04..0.04 frame
        ax.set_ylim(0, 1)
        ax.text(0.5, 0.5, "no rejects, empty answers or looping on any endpoint", ha="center", transform=ax.transAxes)
    ax.legend(fontsize=7)
    return fig
