"""`regen audit --html`: the audit report (dataset/audit.py's dict) as one self-contained HTML page, in the look of
`regen inspect --html` (page.py: the same style sheet, tables and inline plots; matplotlib loads on the first plot).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .page import document, escape, histogram, number, png, write_page

_KEYS = ["count", "p1", "p10", "p50", "p90", "p99", "mean", "max"]


def write_audit_html(report: dict[str, Any], path: Path) -> None:
    """Write the audit `report` to `path` as a single offline HTML page."""
    body = [
        f"<h1>regen audit: {escape(report['path'])}</h1>",
        _summary(report),
        "<h2>By reason</h2>",
        _reasons(report),
        "<h2>By turn</h2>",
        _by_turn(report["by_turn"]),
    ]
    if report["by"]:
        body += [f"<h2>By {escape(report['by'])}</h2>", _groups(report)]
    body += [
        "<h2>Lengths (existing assistant turns)</h2>",
        _lengths(report["lengths"]),
        '<div class="plots">',
        *(f'<img alt="{escape(name)}" src="data:image/png;base64,{image}">' for name, image in _plots(report)),
        "</div>",
        "<h2>Examples</h2>",
        *(_example(reason, ex) for reason, examples in report["examples"].items() for ex in examples),
    ]
    write_page(Path(path), document("regen audit", body))


def _summary(r: dict[str, Any]) -> str:
    items = [
        f"<li>{r['rows']:,} rows in {len(r['files'])} files, {r['assistant_turns']:,} assistant turns "
        f"({r['missing_turns']:,} missing after a trailing user turn)</li>",
        f'<li class="warn">failing: {r["failing_rows"]:,} rows ({r["failing_share"]:.1%}), '
        f"{r['failing_turns']:,} turns</li>"
        if r["failing_rows"]
        else "<li>no row fails</li>",
        f"<li>thinking expected: {'yes' if r['thinking'] else 'no'}; examples seed {r['seed']}</li>",
    ]
    return "<ul>" + "".join(items) + "</ul>"


def _reasons(r: dict[str, Any]) -> str:
    head = "<tr><th>reason</th><th>rows</th><th>share of rows</th><th>turns</th></tr>"
    rows = [
        f'<tr><td>{escape(k)}</td><td class="n">{v:,}</td><td class="n">{r["by_reason_share"][k]:.1%}</td>'
        f'<td class="n">{number(r["turns_by_reason"].get(k))}</td></tr>'
        for k, v in r["by_reason"].items()
    ]
    return f"<table>{head}{''.join(rows)}</table>"


def _by_turn(by_turn: dict[str, dict[str, Any]]) -> str:
    reasons = sorted({reason for t in by_turn.values() for reason in t["by_reason"]})
    head = "<tr><th>turn</th><th>turns</th><th>failing</th>" + "".join(f"<th>{escape(x)}</th>" for x in reasons)
    rows = [
        f'<tr><td>{escape(k)}</td><td class="n">{t["turns"]:,}</td><td class="n">{t["failing"]:,}</td>'
        + "".join(f'<td class="n">{t["by_reason"].get(x, 0):,}</td>' for x in reasons)
        + "</tr>"
        for k, t in by_turn.items()
    ]
    return f"<table>{head}</tr>{''.join(rows)}</table>"


def _groups(r: dict[str, Any]) -> str:
    head = f"<tr><th>{escape(r['by'])}</th><th>rows</th><th>failing</th><th>share</th><th>by reason</th></tr>"
    rows = []
    for name, g in r["groups"].items():
        reasons = ", ".join(f"{k} {v:,}" for k, v in g["by_reason"].items())
        cls = ' class="flag"' if g["failing_share"] > r["failing_share"] * 1.5 and g["failing_rows"] else ""
        rows.append(
            f'<tr{cls}><td>{escape(name)}</td><td class="n">{g["rows"]:,}</td><td class="n">{g["failing_rows"]:,}</td>'
            f'<td class="n">{g["failing_share"]:.1%}</td><td>{escape(reasons)}</td></tr>'
        )
    return f"<table>{head}{''.join(rows)}</table>"


def _lengths(lengths: dict[str, dict[str, Any]]) -> str:
    head = "<tr><th></th>" + "".join(f"<th>{k}</th>" for k in _KEYS) + "</tr>"
    rows = [
        f"<tr><td>{escape(name)}</td>" + "".join(f'<td class="n">{number(p.get(k))}</td>' for k in _KEYS) + "</tr>"
        for name, p in lengths.items()
    ]
    return f"<table>{head}{''.join(rows)}</table>"


def _plots(r: dict[str, Any]) -> list[tuple[str, str]]:
    plots = []
    for name, hist in r["histograms"].items():
        fig = histogram(hist, title=name.replace("_", " "), ylabel="turns", color="#4c72b0")
        plots.append((name, png(fig)))
    return plots


def _example(reason: str, ex: dict[str, Any]) -> str:
    title = f"{reason} · {ex['id']} · {ex['source']}" + (f" · turn {ex['turn']}" if "turn" in ex else "")
    parts = [f"<details><summary>{escape(title)}</summary>", f'<p class="warn">{escape(ex["detail"])}</p>']
    for name in ("reasoning", "answer"):
        if name in ex:
            parts.append(f"<b>{name}</b><pre>{escape(ex[name])}</pre>")
    parts.append("</details>")
    return "".join(parts)
