"""write_html: one offline file, and its plots really render (headless Chromium screenshot).

The render test needs a system Chromium (Debian's `chromium`, or `$REGEN_CHROMIUM`); on a machine without one it is
skipped with a message saying so (CI installs it in its own steps), never installed by the tests.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from pipeline.inspection import inspect_run, write_html
from tests.helpers.inspection_runs import build_run

REASONING_BLUE = (0x4C, 0x72, 0xB0)  # the reasoning histogram's bar colour (report.py)
ANSWER_ORANGE = (0xDD, 0x84, 0x52)


def test_html_is_self_contained(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    write_html(inspect_run(build_run(tmp_path), sample=3), out)
    page = out.read_text(encoding="utf-8")
    assert page.count('src="data:image/png;base64,') == 4
    assert not re.search(r'(src|href)="(https?:)?//', page)  # nothing fetched from the network
    assert "shards/w0-0002.parquet" in page and 'class="flag"' in page
    assert "empty_answer 40% vs 0% elsewhere" in page


CHROMIUM = os.environ.get("REGEN_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="no system Chromium (install Debian's chromium, or set REGEN_CHROMIUM)")
def test_plots_render_in_chromium(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    write_html(inspect_run(build_run(tmp_path), sample=2), out)
    shot = tmp_path / "shot.png"
    assert CHROMIUM is not None
    argv = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--screenshot={shot}",
        "--window-size=1200,2000",
        out.as_uri(),
    ]
    subprocess.run(argv, check=True, capture_output=True, timeout=60)
    pixels = (matplotlib.image.imread(shot)[..., :3] * 255).round().astype(np.int16)
    plots = pixels[200:1100]  # the plot grid sits under the summary list
    colours = np.unique(plots.reshape(-1, 3), axis=0)
    assert len(colours) > 200  # antialiased axes, text and bars, not a blank or broken-image box
    for colour in (REASONING_BLUE, ANSWER_ORANGE):
        near = (np.abs(plots - np.array(colour)).max(axis=-1) <= 6).sum()
        assert near > 2000, f"too few {colour} pixels ({near}): a histogram did not render"


def test_token_percentiles_are_whole_numbers_and_a_ratio_keeps_two_digits() -> None:
    from pipeline.inspection.report import _percentiles

    report = {"percentiles_of": 3, "percentiles": {
        "completion_tokens": {"count": 3, "p1": 78.77, "p10": 80.2, "p50": 1234.5, "p90": 2000.0, "p99": 2100.4,
                              "mean": 99.5, "max": 2200},
        "reasoning_answer_ratio": {"count": 3, "p50": 1.234}}}  # fmt: skip
    html = _percentiles(report)
    assert ">79<" in html and ">1,234<" in html and "78.77" not in html and ">1.23<" in html


def test_the_endpoint_plot_says_so_when_every_rate_is_zero() -> None:
    from pipeline.inspection.report import _endpoint_bars

    zero = {"reject_rate": 0.0, "empty_answer_rate": 0.0, "repetition_rate": 0.0}
    ax = _endpoint_bars({"http://a:30000": zero, "http://b:30000": zero}).axes[0]
    assert ax.get_ylim() == (0.0, 1.0) and "no rejects" in ax.texts[0].get_text()
