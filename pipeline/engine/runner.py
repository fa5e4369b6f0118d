"""One `regen run`: plan → reader → dispatcher → validator → store, under one TaskGroup.

The reader streams batches; ids this worker does not own or that are already done are skipped before anything is
queued; a bounded queue keeps memory flat; the store journals every finished prompt and commits shards. SIGINT and
SIGTERM stop the intake, let in-flight requests finish within `client.drain_timeout_s`, commit, and raise
Interrupted (exit 130): rerunning the same command resumes.

The runner wires these and owns no side job: endpoint membership is `endpoints/fleet.py`'s (the embedded simulator
of `url = "sim"` comes from the caller, as `simulator`), the stop on a signal `shutdown.py`'s, the sync cadence
`commits.py`'s, the snapshots on a clock `ticker.py`'s, heartbeats `store/heartbeat.py`'s, memory trimming
`memory.py`'s and /metrics `prometheus.py`'s.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from ..config import Config, check_endpoints
from ..endpoints.autosize import Autosizer
from ..endpoints.fleet import Fleet, StartSimulator
from ..endpoints.health import HealthMonitor
from ..endpoints.pool import Pool
from ..endpoints.server_view import ServerWatch
from ..errors import ConfigError, InputError, Interrupted, RegenError
from ..inputs.reader import PromptReader, first_rows_have_tools
from ..records import BadInput, Prompt, Turn
from ..schema import bad_input_row
from ..store import DoneSet, ResumeState, RunStore, heartbeat, id_hashes, owns_many
from ..store.durable import output_errors
from ..store.layout import RunLayout
from ..store.manifest import begin_run, mark_simulated, updating_manifest
from ..store.remote import output_dir
from .commits import CommitCadence
from .dispatcher import Dispatcher
from .gate import Gate
from .memory import keep_returning_free_memory
from .metrics import Metrics
from .prometheus import Exporter
from .refusals import FIRST_ROWS, check_first_rows, first_row_fields
from .shutdown import Shutdown
from .sink import CountingSink
from .ticker import ProgressFn, Ticker, append_line, progress_lines

log = logging.getLogger("regen.run")
FINAL_SERVER_READ_S = 2.0  # the servers' last reading at the end of a run waits no longer
COUNT_IDS = 65536  # input hashes counted at a time against the done set (`Runner._count`)


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
        result: bool = m["done"] > 0 and m["rejected_by_reason"].get("bad_input", 0) == m["done"]
        return result


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


def run(
    cfg: Config,
    options: RunOptions = RunOptions(),
    on_progress: ProgressFn | None = None,
    *,
    simulator: StartSimulator | None = None,
) -> RunSummary:
    """Run (or resume) the generation described by `cfg`. Raises a RegenError subclass on failure. `simulator`
    serves the endpoints that say `url = "sim"` (the composition root's `pipeline.sim.embedded`; without it such an
    endpoint is a ConfigError)."""
    check_endpoints(cfg)
    return asyncio.run(Runner(cfg, options, on_progress, simulator=simulator).main())


class Runner:
    """Wires one run: input → store → fleet and gate → reader, dispatcher and the side jobs → summary. Each side job
    has its owner: endpoint membership the fleet, signals and the drain `shutdown`, the sync cadence `commits`,
    snapshots `ticker`, heartbeats `store.heartbeat`, memory trimming `memory`, /metrics `prometheus`."""

    def __init__(
        self,
        cfg: Config,
        options: RunOptions,
        on_progress: ProgressFn | None,
        *,
        simulator: StartSimulator | None = None,
    ):
        self.cfg = cfg
        self.opt = options
        self.on_progress = on_progress
        self.run_dir = output_dir(cfg.output)  # a bucket run's node-local working copy (store/remote.py)
        self.metrics = Metrics()
        self.fleet = Fleet(cfg, simulator=simulator, on_event=self.metrics.record_error)
        self.shutdown = Shutdown(drain_timeout_s=cfg.client.drain_timeout_s, handle_signals=options.handle_signals)
        self.gate: Gate | None = None
        self._set_aside: list[dict[str, str]] = []
        self._partial: dict[str, list[Turn]] = {}
        self._queue: asyncio.Queue[Prompt | None] | None = None
        self._started = time.time()
        self._ended = ""  # how the run ended, for its last heartbeat: finished, interrupted ("" = stopped on an error)
        self.servers: ServerWatch | None = None  # what each server says of itself (client.server_view_interval_s)
        out = cfg.output
        self.exporter = Exporter(out.metrics_host, out.metrics_port, worker=options.worker_index)

    @property
    def pool(self) -> Pool | None:
        return self.fleet.pool

    async def main(self) -> RunSummary:
        async with self.exporter.serving(self.cfg.output.metrics_linger_s):
            return await self._main()

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
        heart = asyncio.create_task(heartbeat.keep_beating(self.run_dir, self.opt.worker_index, self._started))
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
            async with self.fleet.opened() as pool:
                self.gate = Gate(self.cfg, pool, skip=self.opt.skip_preflight, workers=self.opt.num_workers)
                self.gate.needs_tools = await asyncio.to_thread(first_rows_have_tools, reader, FIRST_ROWS)
                record = await self.gate.admit_all()
                self._record_preflight(record)
                interrupted = await self._engine(reader, state.done, store)
        finally:
            heart.cancel()
            await asyncio.wait([heart])  # its beat in flight is written before the last one below
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
        hashes = np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)
        del parts
        hashes.sort()  # in place: two copies of the run's hashes at the peak, not three (8 MB each per million)
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
        """Prompts this worker owns, and how many of them are not done yet: counted COUNT_IDS hashes at a time, so
        the masks and lookups beside the input's hashes stay small (at once they were ~21 MB at 902K ids)."""
        total = pending = 0
        for start in range(0, len(hashes), COUNT_IDS):
            part = hashes[start : start + COUNT_IDS]
            mine = part[owns_many(part, self.opt.worker_index, self.opt.num_workers)]
            total += len(mine)
            pending += int((~done.contains_many(mine)).sum())
        return total, pending

    async def _engine(self, reader: PromptReader, done: DoneSet, store: RunStore) -> bool:
        assert self.pool is not None
        capacity = sum(ep.capacity for ep in self.pool.endpoints)
        queue: asyncio.Queue[Prompt | None] = asyncio.Queue(maxsize=self.cfg.client.queue_size or max(64, capacity))
        self._queue = queue
        commits = CommitCadence(store, self.metrics, interval_s=self.cfg.output.sync_interval_s)
        sink = CountingSink(store, self.metrics, on_add=commits.on_add)
        dispatcher = Dispatcher(self.cfg, self.pool, sink, self.metrics, partial=self._partial)
        ticker = Ticker(
            self.metrics,
            self._snapshot,
            path=RunLayout(self.run_dir).metrics_file(self.opt.worker_index),
            interval_s=self.opt.progress_interval_s,
            exporter=self.exporter,
            on_progress=self.on_progress,
        )
        self.shutdown.install()
        try:
            async with asyncio.TaskGroup() as tg:
                background = [
                    tg.create_task(commits.run()),
                    tg.create_task(ticker.run()),
                    tg.create_task(progress_lines(self._snapshot, self.cfg.output.progress_interval_s)),
                    tg.create_task(keep_returning_free_memory()),
                    tg.create_task(self._monitor().run()),
                    tg.create_task(dispatcher.watch_hangs()),
                    tg.create_task(
                        Autosizer(self.pool, workers=self.opt.num_workers, on_event=self.metrics.record_error).run()
                    ),
                    tg.create_task(self.fleet.watch()),
                ]
                if (servers := self._server_watch()) is not None:
                    background.append(tg.create_task(servers.run()))
                producer = tg.create_task(self._produce(reader, done, store, queue))
                feeder = tg.create_task(dispatcher.feed(queue, tg))
                drainer = tg.create_task(self.shutdown.drain_on_stop(producer, feeder, dispatcher))
                await asyncio.wait([feeder])
                while dispatcher.inflight:
                    await asyncio.wait(list(dispatcher.inflight))
                for task in [*background, drainer, producer]:
                    task.cancel()
            if self.servers is not None and not self.shutdown.requested.is_set():  # so the run's means span all of it
                await self.servers.read_all(final=True, timeout_s=FINAL_SERVER_READ_S)
        except* RegenError as group:
            raise group.exceptions[0] from None
        finally:
            self.shutdown.remove()
        return self.shutdown.requested.is_set()

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
            assert self.gate is not None
            self.servers = ServerWatch(self.pool, interval_s=interval, advertised=self.gate.advertised_capacity)
        return self.servers

    def _record_preflight(self, record: dict[str, Any]) -> None:
        """run.json keeps what preflight saw (server settings for the dataset card), or that it was skipped."""
        slim = {"skipped": record.get("skipped", False)}
        for result in record.get("endpoints", []):
            slim.setdefault("endpoints", []).append(
                {k: result.get(k) for k in ("url", "ok", "reachable", "version", "info", "checks")}
            )
        simulated = self.fleet.simulated
        for r in slim.get("endpoints", []):
            if (r.get("info") or {}).get("simulator"):
                simulated.setdefault(r["url"], r["url"])
        for name in sorted(set(simulated.values())):
            log.warning(
                "endpoint %s is regen's simulator: its completions are filler text, not model output (run.json, "
                "status, inspect and the dataset card say so)", name, extra={"event": "simulator", "url": name},
            )  # fmt: skip
        with updating_manifest(self.run_dir) as manifest:
            manifest["preflight"] = slim
            mark_simulated(manifest, simulated.values())

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
        append_line(path, orjson.dumps(snap))
        with updating_manifest(self.run_dir) as manifest:
            manifest.setdefault("counts", {})[f"worker-{self.opt.worker_index}"] = {
                k: snap[k] for k in ("total", "done", "accepted", "rejected", "rejected_by_reason", "pending")
            }
            for url, report in self.gate.results.items() if self.gate else ():  # admitted since the start
                if report.info.get("simulator"):
                    self.fleet.simulated.setdefault(url, url)
            mark_simulated(manifest, self.fleet.simulated.values())
        self.exporter.publish(snap, finished=True)
        self._ended = "interrupted" if interrupted else "finished"
        heartbeat.beat(self.run_dir, self.opt.worker_index, self._started, self._ended)
        return RunSummary(self.run_dir, snap, snap.get("endpoints", {}), interrupted, self._set_aside)


def _holds_no_row(reader: PromptReader) -> bool:
    """Whether the input has no row at all (an empty file): not a selection that left nothing to do."""
    return next(itertools.chain.from_iterable(reader.iter_batches()), None) is None
