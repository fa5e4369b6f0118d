"""The progress bar and final summary of `regen run` (CLI side: the only place that draws)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from ..endpoints.server_view import summary_line
from ..store.layout import RunLayout
from .refusals import refused_summary


class Progress:
    """A tqdm bar over every prompt this worker owns: resumed prompts fill it from the start (`initial`) but do not
    count towards the rate, so a resumed run opens at its real speed, and the last frame is drawn from the final
    snapshot, so a finished run ends at 100%."""

    def __init__(self, *, enabled: bool = True, file: TextIO | None = None, limit: int | None = None):
        self.enabled = enabled
        self.file = file
        self.limit = limit  # --limit: this invocation ends after this many more prompts, and so does the bar
        self.bar: tqdm[Any] | None = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the bar (before printing what follows it); closing twice is nothing."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def update(self, snap: dict[str, Any]) -> None:
        if not self.enabled:
            return
        refused = snap["rejected_by_reason"].get("bad_input", 0)  # never sent: not progress, not in the rate
        finished = snap["already_done"] + snap["done"] - refused
        total = snap["total"] - refused
        if self.limit is not None:
            total = min(total, snap["already_done"] + self.limit - refused)
        if self.bar is None:
            # Prompts finished before the bar opens (resumed, or done before the first snapshot) are its initial
            # count: tqdm's rate is (n - initial) / elapsed, so they never show as prompts done in no time.
            self.bar = tqdm(
                total=total,
                initial=finished,
                unit="prompt",
                dynamic_ncols=True,
                file=self.file or sys.stderr,
                smoothing=0.1,
            )
        rejects = ",".join(f"{k}={v}" for k, v in sorted(snap["rejected_by_reason"].items())) or "0"
        self.bar.total = total
        inflight = " ".join(f"{_host_port(url)}:{e['inflight']}" for url, e in snap.get("endpoints", {}).items())
        rate = snap.get("recent_output_tokens_per_s", snap["output_tokens_per_s"])
        self.bar.set_postfix_str(f"tok/s={rate:,.0f} rejects={rejects} inflight={inflight}", refresh=False)
        self.bar.update(finished - self.bar.n)  # through update(), so the smoothed rate sees every step
        self.bar.refresh()

    def print_summary(self, snap: dict[str, Any], run_dir: Path, *, as_log: bool = False) -> None:
        """The end of a run in a few lines, or (`as_log`) one `summary` record with the numbers as fields."""
        if as_log:
            keep = ("total", "already_done", "done", "accepted", "rejected", "rejected_by_reason", "pending")
            logging.getLogger("regen.run").info(
                "run %s: %d prompts finished in %.1fs (%d accepted, %d rejected; %d pending)",
                run_dir, snap["done"], snap["elapsed_s"], snap["accepted"], snap["rejected"], snap["pending"],
                extra={
                    "event": "summary",
                    "run_dir": str(run_dir),
                    **{k: snap[k] for k in keep},
                    "elapsed_s": round(snap["elapsed_s"], 3),
                    "completions_per_s": round(snap["completions_per_s"], 3),
                    "output_tokens_per_s": round(snap["output_tokens_per_s"], 1),
                    "endpoints": {url: ep["state"] for url, ep in snap.get("endpoints", {}).items()},
                    "later_turns": snap.get("later_turns", 0),
                    "later_turns_same_endpoint": snap.get("later_turns_same_endpoint", 0),
                    "servers": {url: view.get("run") for url, view in (snap.get("servers") or {}).items()},
                },
            )  # fmt: skip
            if warning := refused_summary(snap["rejected_by_reason"], snap["done"]):
                logging.getLogger("regen.run").warning(warning, extra={"event": "refused"})
            return
        lines = [
            f"regen: run {run_dir}: {snap['done']} prompts finished in {snap['elapsed_s']:.1f}s "
            f"({snap['accepted']} accepted, {snap['rejected']} rejected; "
            f"{snap['already_done']} were already done, {snap['pending']} pending)",
            f"  throughput: {snap['completions_per_s']:.1f} completions/s, "
            f"{snap['output_tokens_per_s']:,.0f} output tok/s",
        ]
        if snap["rejected_by_reason"]:
            reasons = ", ".join(f"{k}: {v}" for k, v in sorted(snap["rejected_by_reason"].items()))
            lines.append(f"  rejects: {reasons}")
        if warning := refused_summary(snap["rejected_by_reason"], snap["done"]):
            lines.append(f"  warning: {warning}")
        if snap.get("later_turns"):
            lines.append(f"  prefix reuse: {prefix_reuse(snap)}")
        if (loops := snap.get("loops") or {}).get("looping"):
            lines.append(f"  loops: {loops_line(loops)}")
        for url, ep in snap.get("endpoints", {}).items():
            lines.append(f"  endpoint {url}: {ep['ok']} ok, {ep['errors']} errors, state {ep['state']}")
        lines += [summary_line(url, view) for url, view in (snap.get("servers") or {}).items()]
        layout = RunLayout(run_dir)
        lines.append(f"  shards: {layout.shards}  rejects: {layout.rejects}")
        print("\n".join(lines), file=sys.stderr)


def _host_port(url: str) -> str:
    """An endpoint as the bar names it: host:port, no scheme."""
    return url.split("://", 1)[-1].rstrip("/")


def loops_line(loops: dict[str, Any]) -> str:
    """Completions judged looping, how many the stream guard stopped early, and the tokens that saved."""
    return (
        f"{loops['looping']} looping completions resampled, {loops['stopped']} stopped early "
        f"({loops['tokens_saved']:,} output tokens not generated)"
    )


def prefix_reuse(snap: dict[str, Any]) -> str:
    """Turns after a conversation's first that went to the endpoint of the turn before (whose prefix cache holds
    their history), of all such turns."""
    same, later = snap.get("later_turns_same_endpoint", 0), snap.get("later_turns", 0)
    return f"{same}/{later} later turns on their conversation's endpoint ({same / max(1, later):.1%})"
