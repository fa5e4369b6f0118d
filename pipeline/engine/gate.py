"""Which endpoints may generate: preflight at start, re-verification when they come back or on an interval.

At start every endpoint is preflighted against `[expect]`. A reachable endpoint that is configured differently
stops the run before any prompt is sent (PreflightError, exit 3). An unreachable one is not fatal: it starts
down, the health monitor keeps probing it, and it is admitted once it answers and passes preflight. An endpoint
that comes back from down, and every live endpoint on `client.recheck_interval_s`, must still report the server
configuration it was admitted with; one that restarted with different args is retired for the rest of the run.
When an endpoint's `concurrency` is 0, its capacity is taken from what the server advertises.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any

from ..config import Config, api_key_for
from ..endpoints.autosize import AUTO_DEFAULT, full_batch
from ..endpoints.health import NOT_YET
from ..endpoints.pool import Pool
from ..endpoints.state import EndpointState
from ..errors import PreflightError, RegenError
from ..server.checks import EndpointReport, judge_tool_parser
from ..server.preflight import check_endpoint, fingerprint_changes, format_preflight, server_fingerprint

log = logging.getLogger("regen.preflight")


def _warming_up(report: EndpointReport) -> bool:
    """A server whose /health says 503 (loading weights, warming up) and nothing else is wrong is not drift: it
    starts down, like an unreachable one, and joins once it is ready and passes preflight."""
    failed = [c for c in report.checks if not c.ok]
    return bool(failed) and all(c.name == "health" and c.actual == 503 for c in failed)


class Gate:
    def __init__(self, cfg: Config, pool: Pool, *, skip: bool = False, workers: int = 1):
        self.cfg = cfg
        self.pool = pool
        self.skip = skip
        self.workers = workers  # automatic capacity starts at 1/workers of what the server advertises
        self.fingerprints: dict[str, dict[str, Any]] = {}
        self.pending: set[str] = set()  # unreachable at start: preflight before first use
        self.results: dict[str, EndpointReport] = {}
        self.needs_tools = False  # the input has tools: a server without a tool-call parser is reported

    def _key(self, ep: EndpointState) -> str | None:
        return api_key_for(ep.api_key_env, "api_key_env")

    async def admit_all(self) -> dict[str, Any]:
        """Preflight every endpoint at once; raise PreflightError on drift. Returns what run.json records."""
        if self.skip:
            return {"skipped": True}
        reports = await asyncio.gather(*(self._preflight(ep) for ep in self.pool.endpoints))
        drifted = [r for r in reports if r.reachable and not r.ok and not _warming_up(r)]
        if drifted:
            raise PreflightError(
                "preflight failed: an endpoint is not configured as [expect] says; no prompt was sent.\n"
                + format_preflight({"ok": False, "endpoints": [r.as_json() for r in drifted]})
                + "\n(fix the server or the config; --skip-preflight runs anyway and records it in run.json)"
            )
        for ep, report in zip(self.pool.endpoints, reports, strict=True):
            if not report.reachable or _warming_up(report):
                self.pending.add(ep.url)
                why = "still warming up (/health 503)" if report.reachable else _unreachable(report)
                self.pool.mark_down(ep, f"{why}; probing until it is up, {self._deadline()}")
        if self.needs_tools:
            reports = [self._tool_parsers(report) for report in reports]
            self._refuse_without_tool_parser(reports)
        return {"skipped": False, "endpoints": [r.as_json() for r in reports]}

    def _refuse_without_tool_parser(self, reports: list[EndpointReport]) -> None:
        """The input has tools and a server parses no tool calls: its model's calls would come back as text. Every
        such turn would be rejected `tool_call` (never stored as an answer), so the run stops before sending
        anything (exit 3, as on drift) unless `client.allow_no_tool_parser` says to go on."""
        missing = [c for r in reports for c in r.checks if c.key == "tool_call_parser" and c.level == "warning"]
        if not missing or self.cfg.client.allow_no_tool_parser:
            return
        raise PreflightError(
            "preflight failed: the input has tools, but a server parses no tool calls; no prompt was sent.\n"
            + "\n".join(f"  {c.hint}" for c in missing)
            + "\n(a call would come back as text and be rejected tool_call, never stored as an answer; set "
            "client.allow_no_tool_parser = true to run anyway)"
        )

    def _tool_parsers(self, report: EndpointReport) -> EndpointReport:
        """Warn, before any prompt is sent, about each server that would leave tool calls in the text; the report
        with those warnings."""
        warnings = judge_tool_parser(report)
        for check in warnings:
            log.warning("%s", check.hint, extra={"event": "no_tool_call_parser", "url": report.url})
        if warnings:
            report = dataclasses.replace(report, checks=report.checks + tuple(warnings))
            self.results[report.url] = report
        return report

    def _deadline(self) -> str:
        """When the run gives up if no endpoint comes up (client.no_endpoint_timeout_s from now, as a UTC time)."""
        timeout = self.cfg.client.no_endpoint_timeout_s
        at = give_up_at(time.time() + timeout)
        return f"the run gives up at {at} (no_endpoint_timeout_s {timeout:.0f}) unless an endpoint is up"

    async def _preflight(self, ep: EndpointState) -> EndpointReport:
        report = await check_endpoint(ep.url, self.cfg, api_key=self._key(ep), transport=ep.client.control)
        self.results[ep.url] = report
        if report.ok:
            await self._admitted(ep, report)
        return report

    async def _admitted(self, ep: EndpointState, report: EndpointReport) -> None:
        self.pending.discard(ep.url)
        router = report.workers is not None  # its own version and /server_info are not its workers'
        known = not router and report.info.get("server_info_path") is not None  # vLLM has no /server_info
        speculative = bool(report.info.get("speculative_decoding")) if known else None
        ep.client.adopt(report.info.get("version"), speculative=speculative, router=router)
        if ep.auto_capacity:
            advertised = report.info.get("effective_max_running_requests")
            total = full_batch(advertised, self.workers) if advertised else AUTO_DEFAULT
            ep.capacity = max(1, -(-total // self.workers))  # this worker's share until /v1/loads says more
            ep.capacity_source = f"server advertises {advertised}" if advertised else "default (server advertised none)"
        log.info(
            "%s: admitted (preflight passed), capacity %d (%s)", ep.url, ep.capacity, ep.capacity_source,
            extra={"event": "endpoint_admitted", "url": ep.url, "capacity": ep.capacity},
        )  # fmt: skip
        try:
            self.fingerprints[ep.url] = await server_fingerprint(
                ep.url, self._key(ep), self.cfg.client, ep.client.control
            )
        except RegenError:
            pass  # a router has no /server_info of its own; its workers were checked by preflight

    async def verify(self, ep: EndpointState) -> str | None:
        """None when the endpoint may (still) be used; else why it must be retired."""
        if self.skip:
            return None
        if ep.url in self.pending:
            report = await self._preflight(ep)
            if not report.reachable:
                return NOT_YET[0]
            if _warming_up(report):
                return NOT_YET[1]
            return None if report.ok else "failed preflight:\n" + format_preflight({"endpoints": [report.as_json()]})
        before = self.fingerprints.get(ep.url)
        if before is None:
            return None
        try:
            now = await server_fingerprint(ep.url, self._key(ep), self.cfg.client, ep.client.control)
        except RegenError:
            return None  # down again: the health monitor deals with it
        changes = fingerprint_changes(before, now)
        if changes:
            log.warning(
                "%s: server args changed: %s", ep.url, "; ".join(changes), extra={"event": "drift", "url": ep.url}
            )
        return "restarted with a different configuration: " + "; ".join(changes) if changes else None

    def advertised_capacity(self, url: str) -> int | None:
        """The concurrency cap preflight read from the server (a router: its workers' together), or None."""
        report = self.results.get(url)
        if report is None:
            return None
        reports = [w for w in report.workers if w.reachable] if report.workers else [report]
        caps = [r.info.get("effective_max_running_requests") for r in reports]
        return sum(c for c in caps if isinstance(c, int)) if caps and all(isinstance(c, int) for c in caps) else None


def _unreachable(report: EndpointReport) -> str:
    """Why preflight could not reach the endpoint, as the socket said it: connection refused, a DNS failure..."""
    reach = next((c.actual for c in report.checks if c.name == "reachable"), "")
    said = (
        "connection refused (nothing listens on the port: a wrong port, or still loading)"
        if reach == "port closed"
        else reach
    )
    return f"unreachable at preflight: {said or 'no answer'}"


def give_up_at(epoch: float) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(epoch))
