"""One `regen run`: plan → reader → dispatcher → validator → store, under one TaskGroup.

The reader streams batches; ids this worker does not own or that are already done are skipped before anything is
queued; a bounded queue keeps memory flat; the store journals every finished prompt and commits shards. SIGINT and
SIGTERM stop the intake, let in-flight requests finish within `client.drain_timeout_s`, commit, and raise
Interrupted (exit 130): rerunning the same command resumes.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from ..config import Config, EndpointConfig, api_key_for, check_endpoints, read_endpoints_file
from ..endpoints.autosize import Autosizer
from ..endpoints.client import EndpointClient
from ..endpoints.health import HealthMonitor
from ..endpoints.pool import Pool
from ..endpoints.server_view import ServerWatch
from ..endpoints.state import DRAINING, EndpointState
from ..endpoints.transport import proxy_for, shown
from ..errors import ConfigError, InputError, Interrupted, RegenError
from ..inputs.reader import PromptReader, first_rows_have_tools
from ..records import BadInput, Prompt, Turn
from ..schema import bad_input_row
from ..store import DoneSet, ResumeState, RunStore, heartbeat, id_hashes, owns_many
from ..store.durable import output_errors
from ..store.layout import RunLayout
from ..store.manifest import SIM_URL, begin_run, mark_simulated, updating_manifest
from ..store.remote import output_dir
from .dispatcher import Dispatcher
from .gate import Gate, capacity_of
from .logs import ProgressLog
from .memory import TRIM_INTERVAL_S, return_free_memory
from .metrics import Metrics
from .prometheus import Exporter
from .refusals import FIRST_ROWS, check_first_rows, first_row_fields
from .sink import CountingSink

log = logging.getLogger("regen.run")
HEARTBEAT_INTERVAL_S = 1.0
FINAL_SERVER_READ_S = 2.0  # the servers' last reading at the end of a run waits no longer

ProgressFn = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class RunOptions:
    worker_index: int = 0
    num_workers: int = 1
    limit: int | None = None
    retry_rejects: bool = False
    move_foreign: bool = False
    allow_config_change: bool = False
    skip_preflight: bool = False
    input_path: str | None = None
    only_ids: frozenset[str] | None = None  # --only-ids: send only these ids (or `row:<n>` row numbers)
    handle_signals: bool = True
    progress_interval_s: float = 0.5


@dataclass
class RunSummary:
    run_dir: Path
    metrics: dict[str, Any]
    endpoints: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False
    set_aside: list[dict[str, str]] = field(default_factory=list)  # damaged parts moved to RUN_DIR/damaged/

    @property
    def refused_all(self) -> bool:
        """Every row this invocation finished was refused (bad_input): a wrong dataset, never a success."""
        m = self.metrics
        return m["done"] > 0 and m["rejected_by_reason"].get("bad_input", 0) == m["done"]


def worker_from_env(index: int | None, count: int | None) -> tuple[int, int]:
    """--worker-index/--num-workers, defaulting from a Slurm job array or a Kubernetes Indexed Job.

    An Indexed Job sets `JOB_COMPLETION_INDEX` but not its `completions`: `REGEN_NUM_WORKERS` gives the count."""
    env = os.environ
    if count is None and env.get("REGEN_NUM_WORKERS"):
        count = _env_int("REGEN_NUM_WORKERS")
    if index is None and "SLURM_ARRAY_TASK_ID" in env:
        index = _env_int("SLURM_ARRAY_TASK_ID")
        if count is None and "SLURM_ARRAY_TASK_COUNT" in env:
            count = _env_int("SLURM_ARRAY_TASK_COUNT")
            index -= _env_int("SLURM_ARRAY_TASK_MIN") if env.get("SLURM_ARRAY_TASK_MIN") else 0
    elif index is None and "JOB_COMPLETION_INDEX" in env:
        index = _env_int("JOB_COMPLETION_INDEX")
        if count is None:
            raise ConfigError(
                f"JOB_COMPLETION_INDEX={index} (a Kubernetes Indexed Job) but no worker count: set REGEN_NUM_WORKERS "
                "(or --num-workers) to the Job's completions"
            )
    index = index or 0
    count = count or 1
    if not 0 <= index < count:
        raise ConfigError(f"--worker-index {index} must be in [0, {count}) for --num-workers {count}")
    return index, count


def _env_int(name: str) -> int:
    try:
        return int(os.environ[name])
    except ValueError:
        raise ConfigError(f"${name} must be an integer, got {os.environ[name]!r}") from None


def run(cfg: Config, options: RunOptions = RunOptions(), on_progress: ProgressFn | None = None) -> RunSummary:
    """Run (or resume) the generation described by `cfg`. Raises a RegenError subclass on failure."""
    check_endpoints(cfg)
    return asyncio.run(Runner(cfg, options, on_progress).main())


class Runner:
    def __init__(self, cfg: Config, options: RunOptions, on_progress: ProgressFn | None):
        self.cfg = cfg
        self.opt = options
        self.on_progress = on_progress
        self.run_dir = output_dir(cfg.output)  # a bucket run's node-local working copy (store/remote.py)
        self.metrics = Metrics()
        self.stop = asyncio.Event()
        self._hurry = asyncio.Event()  # a second signal: cancel what is in flight now
        self._signal_name = "SIGINT"
        self.pool: Pool | None = None
        self._stack: AsyncExitStack | None = None
        self.gate: Gate | None = None
        self._set_aside: list[dict[str, str]] = []
        self._partial: dict[str, list[Turn]] = {}
        self._queue: asyncio.Queue[Prompt | None] | None = None
        self._started = time.time()
        self._ended = ""  # how the run ended, for its last heartbeat: finished, interrupted ("" = stopped on an error)
        # Endpoints known to be regen's simulator, URL -> the name run.json's `simulated_endpoints` lists ("sim" for
        # the embedded one, whose URL is a port of the moment; its URL for a `regen sim` found by preflight).
        self._simulated: dict[str, str] = {}
        self.servers: ServerWatch | None = None  # what each server says of itself (client.server_view_interval_s)
        out = cfg.output
        self.exporter = Exporter(out.metrics_host, out.metrics_port, worker=options.worker_index)

    async def main(self) -> RunSummary:
        if not self.cfg.output.metrics_port:
            return await self._main()
        self.exporter.start()
        log.info("metrics at %s", self.exporter.url, extra={"event": "metrics", "url": self.exporter.url})
        try:
            summary = await self._main()
            await asyncio.sleep(self.cfg.output.metrics_linger_s)  # a last scrape sees the final counts
            return summary
        finally:
            self.exporter.stop()

    async def _main(self) -> RunSummary:
        reader = PromptReader(
            self.cfg.input,
            path_override=self.opt.input_path,
            generation=self.cfg.generation,
            validate=self.cfg.validate,
            only_ids=self.opt.only_ids,
        )
        hashes = await asyncio.to_thread(self._scan, reader)
        if not len(hashes) and await asyncio.to_thread(_holds_no_row, reader.every_row()):
            files = ", ".join(str(p) for p in reader.files()) or str(self.opt.input_path or self.cfg.input.path)
            raise InputError(f"{files}: the input holds no row: nothing to generate (nothing written)")
        await asyncio.to_thread(self._check_first_rows, reader.every_row())
        store, state = await self._open_store([str(p) for p in reader.files()], total=len(hashes))
        self._set_aside = state.set_aside
        self._partial = state.partial
        heart = asyncio.create_task(self._heartbeats())
        try:
            total, pending = self._count(hashes, state.done)
            del hashes
            self.metrics.total, self.metrics.already_done = total, total - pending
            log.info(
                "run %s: worker %d of %d owns %d prompts, %d already done, %d to do%s",
                self.run_dir, self.opt.worker_index, self.opt.num_workers, total, total - pending, pending,
                "" if self.opt.limit is None else f"; {min(self.opt.limit, pending)} now (--limit {self.opt.limit})",
                extra={"event": "start", "total": total, "pending": pending, "worker": self.opt.worker_index},
            )  # fmt: skip
            if pending == 0:
                return self._summary(store, interrupted=False)
            async with self._endpoints() as endpoints:
                self.pool = Pool(
                    endpoints,
                    max_cooldown_s=self.cfg.client.backoff_max_s,
                    no_endpoint_timeout_s=self.cfg.client.no_endpoint_timeout_s,
                    prefer_wait_s=self.cfg.client.sticky_wait_s,
                )
                self.gate = Gate(self.cfg, self.pool, skip=self.opt.skip_preflight, workers=self.opt.num_workers)
                self.gate.needs_tools = await asyncio.to_thread(first_rows_have_tools, reader, FIRST_ROWS)
                record = await self.gate.admit_all()
                self._record_preflight(record)
                interrupted = await self._engine(reader, state.done, store)
        finally:
            heart.cancel()
            await asyncio.to_thread(store.close)
            ended = self._ended or "stopped"
            await asyncio.to_thread(heartbeat.beat, self.run_dir, self.opt.worker_index, self._started, ended)
        summary = self._summary(store, interrupted=interrupted)
        if interrupted:
            raise Interrupted("interrupted after a clean drain; rerun the same command to resume", summary)
        return summary

    async def _open_store(self, files: list[str], *, total: int) -> tuple[RunStore, ResumeState]:
        """Record this invocation in run.json (refusing config drift), then open the store: the resume plan."""
        with output_errors(self.run_dir, "create the run directory"):
            self.run_dir.mkdir(parents=True, exist_ok=True)
        begin_run(
            self.run_dir,
            self.cfg,
            input_files=files,
            allow_config_change=self.opt.allow_config_change,
            extra={
                "worker_index": self.opt.worker_index,
                "num_workers": self.opt.num_workers,
                "input": {"total": total},
            },
        )
        store = RunStore(
            self.run_dir,
            worker_index=self.opt.worker_index,
            num_workers=self.opt.num_workers,
            keep_fields=self.cfg.input.keep_fields,
            shard_rows=self.cfg.output.shard_rows,
            row_group_rows=self.cfg.output.row_group_rows,
            sync_interval_s=self.cfg.output.sync_interval_s,
        )
        state = await asyncio.to_thread(
            store.open, retry_rejects=self.opt.retry_rejects, move_foreign=self.opt.move_foreign
        )
        return store, state

    def _scan(self, reader: PromptReader) -> np.ndarray:
        """One pass over the input ids: their hashes (sorted, unique), after refusing duplicate ids.

        Duplicates are found on the 64-bit hashes; only when some repeat does the reader make the passes that
        confirm them on the real ids and name examples with their file and row (or drop them with dedupe).
        """
        parts = [id_hashes(ids) for ids in reader.scan_ids()]
        hashes = np.sort(np.concatenate(parts)) if parts else np.empty(0, dtype=np.uint64)
        del parts
        if len(hashes) > 1 and bool((hashes[1:] == hashes[:-1]).any()):
            reader.check_duplicates()  # raises InputError naming examples, unless input.dedupe
            hashes = np.unique(hashes)
        return hashes

    def _check_first_rows(self, reader: PromptReader) -> None:
        """A config that does not match its dataset stops here, before anything is written or sent (exit 2).

        Judged on the input's first rows as they are, whatever `input.select` or --only-ids keep: a repair of a
        mostly good dataset sends few rows, and its few unreadable ones must not look like most of them."""
        path = self.opt.input_path or self.cfg.input.path
        check_first_rows(reader.iter_batches(), self.cfg.input, path, lambda: first_row_fields(path))

    def _count(self, hashes: np.ndarray, done: DoneSet) -> tuple[int, int]:
        """Prompts this worker owns, and how many of them are not done yet."""
        mine = hashes[owns_many(hashes, self.opt.worker_index, self.opt.num_workers)]
        return len(mine), int((~done.contains_many(mine)).sum())

    @asynccontextmanager
    async def _endpoints(self) -> AsyncIterator[list[EndpointState]]:
        async with AsyncExitStack() as stack:
            self._stack = stack
            states = []
            configured = self.cfg.endpoints
            if self.cfg.endpoints_file:
                configured = read_endpoints_file(self.cfg.endpoints_file)
            for ep in configured:
                url = await stack.enter_async_context(_endpoint_url(ep))
                states.append(await self._open_endpoint(url, ep))
            yield states

    async def _open_endpoint(self, url: str, ep: EndpointConfig) -> EndpointState:
        assert self._stack is not None
        if ep.url == SIM_URL:
            self._simulated[url] = SIM_URL
        proxy = proxy_for(url)
        if proxy:  # followed, as curl and httpx do; said, because a cluster's proxy is rarely meant for its GPUs
            log.warning(
                "%s: requests (and preflight) go through the proxy %s, from HTTP_PROXY/HTTPS_PROXY; add the host to "
                "NO_PROXY to reach it directly",
                url,
                shown(proxy),
            )
        client = EndpointClient(
            url,
            gen=self.cfg.generation,
            client=self.cfg.client,
            concurrency=ep.concurrency,
            api_key=api_key_for(ep.api_key_env, "api_key_env"),
            honor_overrides=self.cfg.input.request_overrides,
        )
        await self._stack.enter_async_context(client)
        capacity, auto = capacity_of(ep)
        return EndpointState(
            client=client,
            capacity=capacity,
            rps=ep.requests_per_second,
            api_key_env=ep.api_key_env,
            auto_capacity=auto,
            capacity_source="automatic" if auto else "config",
        )

    async def _engine(self, reader: PromptReader, done: DoneSet, store: RunStore) -> bool:
        assert self.pool is not None
        capacity = sum(ep.capacity for ep in self.pool.endpoints)
        queue: asyncio.Queue[Prompt | None] = asyncio.Queue(maxsize=self.cfg.client.queue_size or max(64, capacity))
        self._queue = queue
        backlog = asyncio.Event()  # a row group's worth of rows waits for the journal: sync now (see _syncer)

        def on_add() -> None:
            if store.needs_sync:
                backlog.set()

        sink = CountingSink(store, self.metrics, on_add=on_add)
        dispatcher = Dispatcher(self.cfg, self.pool, sink, self.metrics, partial=self._partial)
        self._install_signals()
        try:
            async with asyncio.TaskGroup() as tg:
                background = [
                    tg.create_task(self._syncer(store, backlog)),
                    tg.create_task(self._ticker()),
                    tg.create_task(self._progress_lines()),
                    tg.create_task(self._return_free_memory()),
                    tg.create_task(self._monitor().run()),
                    tg.create_task(dispatcher.watch_hangs()),
                    tg.create_task(
                        Autosizer(self.pool, workers=self.opt.num_workers, on_event=self.metrics.record_error).run()
                    ),
                    tg.create_task(self._watch_endpoints_file()),
                ]
                if (servers := self._server_watch()) is not None:
                    background.append(tg.create_task(servers.run()))
                producer = tg.create_task(self._produce(reader, done, store, queue))
                feeder = tg.create_task(dispatcher.feed(queue, tg))
                drainer = tg.create_task(self._drain_on_stop(producer, feeder, dispatcher))
                await asyncio.wait([feeder])
                while dispatcher.inflight:
                    await asyncio.wait(list(dispatcher.inflight))
                for task in [*background, drainer, producer]:
                    task.cancel()
            if self.servers is not None and not self.stop.is_set():  # so the run's means span all of it
                await self.servers.read_all(final=True, timeout_s=FINAL_SERVER_READ_S)
        except* RegenError as group:
            raise group.exceptions[0] from None
        finally:
            self._remove_signals()
        return self.stop.is_set()

    async def _produce(
        self, reader: PromptReader, done: DoneSet, store: RunStore, queue: asyncio.Queue[Prompt | None]
    ) -> None:
        budget = self.opt.limit if self.opt.limit is not None else -1
        batches = iter(reader.iter_batches())
        while budget != 0 and (batch := await asyncio.to_thread(next, batches, None)) is not None:
            hashes = id_hashes([p.id for p in batch])
            keep = owns_many(hashes, self.opt.worker_index, self.opt.num_workers) & ~done.contains_many(hashes)
            for item, wanted in zip(batch, keep, strict=True):
                if not wanted or budget == 0:
                    continue
                budget -= 1
                if isinstance(item, BadInput):
                    store.add_rejected(bad_input_row(item))
                    self.metrics.record_reject("bad_input")
                else:
                    await queue.put(item)
        await queue.put(None)

    async def _drain_on_stop(self, producer: asyncio.Task[None], feeder: asyncio.Task[None], d: Dispatcher) -> None:
        """On SIGINT/SIGTERM/SIGHUP: take no new prompts, let in-flight ones finish for a grace period (saying so at
        once), then cancel; a second signal cancels now. A cancelled prompt stays pending: nothing is lost."""
        await self.stop.wait()
        d.stopping = True
        producer.cancel()
        feeder.cancel()  # prompts still queued stay pending for the next run
        timeout = self.cfg.client.drain_timeout_s
        if d.inflight:
            log.warning(
                "%s: finishing %d requests in flight for at most %.0fs, then exiting; %s again to stop now (they "
                "stay pending: nothing finished is lost)",
                self._signal_name, len(d.inflight), timeout, "Ctrl-C" if self._signal_name == "SIGINT" else "signal",
                extra={"event": "draining", "inflight": len(d.inflight), "drain_timeout_s": timeout},
            )  # fmt: skip
        try:
            async with asyncio.timeout(timeout):
                while d.inflight and not self._hurry.is_set():
                    hurry = asyncio.ensure_future(self._hurry.wait())
                    await asyncio.wait([*d.inflight, hurry], return_when=asyncio.FIRST_COMPLETED)
                    hurry.cancel()
        except TimeoutError:
            pass
        if d.inflight:
            log.warning("stopping now: %d requests cancelled, their prompts stay pending", len(d.inflight),
                        extra={"event": "drain_cut", "inflight": len(d.inflight)})  # fmt: skip
        for task in list(d.inflight):
            task.cancel()

    def _on_signal(self, sig: signal.Signals) -> None:
        """The first SIGINT/SIGTERM/SIGHUP drains; a second one stops now."""
        if self.stop.is_set():
            self._hurry.set()
            return
        self._signal_name = sig.name
        self.stop.set()

    async def _watch_endpoints_file(self) -> None:
        """Re-read `endpoints_file` when it changes: new URLs join the pool, removed ones drain."""
        if not self.cfg.endpoints_file:
            return
        assert self.pool is not None
        path = Path(self.cfg.endpoints_file)
        seen: float | None = None
        while True:
            await asyncio.sleep(1.0)
            try:
                mtime = (await asyncio.to_thread(path.stat)).st_mtime
            except OSError:
                continue
            if mtime == seen:
                continue
            seen = mtime
            try:
                listed = await asyncio.to_thread(read_endpoints_file, path)
                wanted = {ep.url.rstrip("/"): ep for ep in listed}
            except (OSError, RegenError) as exc:
                self.metrics.record_error(f"{path}: {exc}")
                continue
            await self._apply_endpoints(wanted)

    async def _apply_endpoints(self, wanted: dict[str, EndpointConfig]) -> None:
        assert self.pool is not None and self._stack is not None
        current = {ep.url: ep for ep in self.pool.endpoints}
        for url, ep in current.items():
            if url not in wanted and ep.state != DRAINING:
                self.pool.drain(ep)
                self.metrics.record_error(f"{url}: removed from the endpoints file, draining")
        for url, epcfg in wanted.items():
            if url in current and current[url].state != DRAINING:
                continue
            if url in current:  # it came back: probe it, then use it again
                self.pool.undrain(current[url])
                continue
            self.pool.add(await self._open_endpoint(url, epcfg))
        await self.pool.notify()

    async def _syncer(self, store: RunStore, backlog: asyncio.Event) -> None:
        """Make finished rows durable every `output.sync_interval_s`, and sooner once a row group's worth waits
        (`backlog`): what waits in memory for the journal then follows the row group, not the rate. At ~3,000
        completions/s a second's rows held ~100 MB of RSS (scripts/bench.py --only overhead)."""
        synced = self.metrics.done
        while True:
            try:
                async with asyncio.timeout(self.cfg.output.sync_interval_s):
                    await backlog.wait()
            except TimeoutError:
                pass
            backlog.clear()
            started, rows = time.monotonic(), self.metrics.done - synced
            await store.sync()
            if rows:
                took = time.monotonic() - started
                self.metrics.commit_seconds.observe(took)
                log.debug("committed %d rows in %.1f ms", rows, took * 1000, extra={"event": "commit", "rows": rows})
                synced += rows

    async def _progress_lines(self) -> None:
        lines = ProgressLog()
        while True:
            await asyncio.sleep(self.cfg.output.progress_interval_s)
            lines.emit(self._snapshot())

    async def _heartbeats(self) -> None:
        """This worker is alive (`regen status` tells a dead run from a slow one): a beat about every second."""
        while True:
            await asyncio.to_thread(heartbeat.beat, self.run_dir, self.opt.worker_index, self._started)
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)

    async def _return_free_memory(self) -> None:
        while True:
            await asyncio.sleep(TRIM_INTERVAL_S)
            return_free_memory()

    async def _ticker(self) -> None:
        path = RunLayout(self.run_dir).metrics_file(self.opt.worker_index)
        path.parent.mkdir(exist_ok=True)
        last_write = 0.0
        while True:
            await asyncio.sleep(self.opt.progress_interval_s)
            self.metrics.tick()
            snap = self._snapshot()
            self.exporter.publish(snap)
            if self.on_progress is not None:
                self.on_progress(snap)
            if time.monotonic() - last_write >= 1.0:
                last_write = time.monotonic()
                await asyncio.to_thread(_append_line, path, orjson.dumps(snap))

    def _monitor(self) -> HealthMonitor:
        assert self.pool is not None and self.gate is not None
        c = self.cfg.client
        return HealthMonitor(
            self.pool,
            interval_s=c.health_interval_s,
            timeout_s=c.health_timeout_s,
            failures=c.health_failures,
            verify=self.gate.verify,
            recheck_interval_s=c.recheck_interval_s,
            on_event=self.metrics.record_error,
        )

    def _server_watch(self) -> ServerWatch | None:
        """What each server says of itself, read every `client.server_view_interval_s` (0: not read)."""
        interval = self.cfg.client.server_view_interval_s
        if interval > 0 and self.pool is not None:
            self.servers = ServerWatch(self.pool, interval_s=interval, advertised=self._advertised_capacity)
        return self.servers

    def _advertised_capacity(self, url: str) -> int | None:
        """The concurrency cap preflight read from the server (a router: its workers' together), or None."""
        report = self.gate.results.get(url) if self.gate is not None else None
        if report is None:
            return None
        reports = [w for w in report.workers if w.reachable] if report.workers else [report]
        caps = [r.info.get("effective_max_running_requests") for r in reports]
        return sum(c for c in caps if isinstance(c, int)) if caps and all(isinstance(c, int) for c in caps) else None

    def _record_preflight(self, record: dict[str, Any]) -> None:
        """run.json keeps what preflight saw (server settings for the dataset card), or that it was skipped."""
        slim = {"skipped": record.get("skipped", False)}
        for result in record.get("endpoints", []):
            slim.setdefault("endpoints", []).append(
                {k: result.get(k) for k in ("url", "ok", "reachable", "version", "info", "checks")}
            )
        for r in slim.get("endpoints", []):
            if (r.get("info") or {}).get("simulator"):
                self._simulated.setdefault(r["url"], r["url"])
        for name in sorted(set(self._simulated.values())):
            log.warning(
                "endpoint %s is regen's simulator: its completions are filler text, not model output (run.json, "
                "status, inspect and the dataset card say so)", name, extra={"event": "simulator", "url": name},
            )  # fmt: skip
        with updating_manifest(self.run_dir) as manifest:
            manifest["preflight"] = slim
            mark_simulated(manifest, self._simulated.values())

    def _snapshot(self) -> dict[str, Any]:
        snap = self.metrics.snapshot()
        snap["endpoints"] = self.pool.snapshot() if self.pool else {}
        snap["queue_depth"] = self._queue.qsize() if self._queue is not None else 0
        snap["servers"] = self.servers.snapshot() if self.servers is not None else {}
        unusable = self.pool.unusable_for() if self.pool else 0.0
        timeout = self.cfg.client.no_endpoint_timeout_s
        snap["gives_up_at"] = time.time() + timeout - unusable if unusable > 0 else None  # no endpoint usable
        return snap

    def _summary(self, store: RunStore, *, interrupted: bool) -> RunSummary:
        snap = self._snapshot()
        path = RunLayout(self.run_dir).metrics_file(self.opt.worker_index)
        path.parent.mkdir(exist_ok=True)
        _append_line(path, orjson.dumps(snap))
        with updating_manifest(self.run_dir) as manifest:
            manifest.setdefault("counts", {})[f"worker-{self.opt.worker_index}"] = {
                k: snap[k] for k in ("total", "done", "accepted", "rejected", "rejected_by_reason", "pending")
            }
            for url, report in self.gate.results.items() if self.gate else ():  # admitted since the start
                if report.info.get("simulator"):
                    self._simulated.setdefault(url, url)
            mark_simulated(manifest, self._simulated.values())
        self.exporter.publish(snap, finished=True)
        self._ended = "interrupted" if interrupted else "finished"
        heartbeat.beat(self.run_dir, self.opt.worker_index, self._started, self._ended)
        return RunSummary(self.run_dir, snap, snap.get("endpoints", {}), interrupted, self._set_aside)

    def _install_signals(self) -> None:
        if not self.opt.handle_signals:
            return
        loop = asyncio.get_running_loop()
        for sig in _SIGNALS:  # SIGHUP too: a closed terminal drains like Ctrl-C
            loop.add_signal_handler(sig, self._on_signal, sig)

    def _remove_signals(self) -> None:
        if not self.opt.handle_signals:
            return
        loop = asyncio.get_running_loop()
        for sig in _SIGNALS:
            loop.remove_signal_handler(sig)


_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _holds_no_row(reader: PromptReader) -> bool:
    """Whether the input has no row at all (an empty file): not a selection that left nothing to do."""
    return next(itertools.chain.from_iterable(reader.iter_batches()), None) is None


def _append_line(path: Path, line: bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(line + b"\n")


@asynccontextmanager
async def _endpoint_url(ep: EndpointConfig) -> AsyncIterator[str]:
    """The endpoint's base URL; `sim` starts the embedded simulator for the length of the run."""
    if ep.url != "sim":
        yield ep.url
        return
    from ..sim import SimConfig, serve  # the simulator is only imported when a config asks for it

    async with serve(SimConfig.from_argv(list(ep.sim_args))) as url:
        yield url
