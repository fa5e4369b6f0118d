"""The progress bar and final summary of `regen run` (CLI side: the only place that draws)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm


class Progress:
    def __init__(self, *, enabled: bool = True):
        self.enabled = enabled
        self.bar: tqdm[Any] | None = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()

    def update(self, snap: dict[str, Any]) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            todo = max(0, snap["total"] - snap["already_done"])
            self.bar = tqdm(total=todo, unit="prompt", dynamic_ncols=True, file=sys.stderr, smoothing=0.1)
        self.bar.n = snap["done"]
        rejects = ",".join(f"{k}={v}" for k, v in sorted(snap["rejected_by_reason"].items())) or "0"
        inflight = " ".join(f"{i}:{e['inflight']}" for i, e in enumerate(snap.get("endpoints", {}).values()))
        rate = snap.get("recent_output_tokens_per_s", snap["output_tokens_per_s"])
        self.bar.set_postfix_str(f"tok/s={rate:,.0f} rejects={rejects} inflight={inflight}", refresh=False)
        self.bar.refresh()

    def print_summary(self, snap: dict[str, Any], run_dir: Path) -> None:
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
        for url, ep in snap.get("endpoints", {}).items():
            lines.append(f"  endpoint {url}: {ep['ok']} ok, {ep['errors']} errors, state {ep['state']}")
        lines.append(f"  shards: {run_dir / 'shards'}  rejects: {run_dir / 'rejects'}")
        print("\n".join(lines), file=sys.stderr)
