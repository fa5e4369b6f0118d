"""The look of regen's HTML pages (`regen inspect --html`, report.py; `regen audit --html`, audit_page.py): one
style sheet, escaped text, number cells, inline PNG plots, and the page written whole to its file.

matplotlib (~0.5 s and ~40 MB of imports) loads on the first plot, inside `figure`, so importing this module costs
`regen status` and a plain `regen inspect` nothing.
"""

from __future__ import annotations

import base64
import html
import io
import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import OutputError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}
th{background:#f0f0f0}td.n{text-align:right;font-variant-numeric:tabular-nums}tr.flag td{background:#ffe4e1}
.plots{display:flex;flex-wrap:wrap;gap:12px}.plots img{width:560px;border:1px solid #ddd}
.warn{color:#a00;font-weight:600}pre{white-space:pre-wrap;background:#f8f8f8;padding:8px;font-size:12px}
details{border:1px solid #ddd;margin:6px 0;padding:6px}summary{cursor:pointer;font-family:monospace}
"""


def document(title: str, body: list[str]) -> str:
    """A whole offline page: `title`, the style sheet inline, then `body`'s parts in order."""
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{title}</title>'
        f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>"
    )


def write_page(path: Path, page: str) -> None:
    """Write an HTML page, creating its folder; OutputError naming the path when it cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(page, encoding="utf-8")
    except (FileExistsError, NotADirectoryError):
        raise OutputError(f"{path}: cannot write the HTML report: a file stands where its folder would be") from None
    except OSError as exc:
        raise OutputError(f"{path}: cannot write the HTML report: {exc.strerror or exc}") from None


def escape(value: Any) -> str:
    """Any value as text safe inside HTML."""
    return html.escape(str(value))


def number(x: Any) -> str:
    """A table cell's number: `-` for none, 2 decimals below 100, whole above, thousands separated."""
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.2f}" if abs(x) < 100 else f"{x:,.0f}"
    return f"{x:,}"


def figure() -> Figure:
    """A new, empty plot; the first call imports matplotlib."""
    import matplotlib

    matplotlib.use("Agg")  # no display; must precede any figure creation
    from matplotlib.figure import Figure

    return Figure(figsize=(6.4, 3.6))


def png(fig: Figure) -> str:
    """The figure as a base64 PNG, for an inline `<img src="data:image/png;base64,...">`."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def histogram(hist: dict[str, Any], *, title: str, ylabel: str, color: str) -> Figure:
    """One histogram (`edges`, `counts` as the report and the audit compute them) as a figure."""
    fig = figure()
    ax = fig.add_subplot()
    if hist["counts"]:
        edges = hist["edges"]
        widths = [b - a for a, b in itertools.pairwise(edges)]
        ax.bar(edges[:-1], hist["counts"], width=widths, align="edge", color=color)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    return fig
