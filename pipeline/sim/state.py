"""`Sim`: one simulated SGLang server's state (resolved args, engine, faults, stats, lifecycle) and its info views.

The HTTP layer (`server.py`) owns sockets and routes; this module owns what `/server_info`, `/model_info`,
`/v1/models`, `/v1/loads` and `/metrics` report, so those views stay consistent with each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ..sglang.flags import flags_of
from ..sglang.models import architecture_of, default_context_length
from ..sglang.releases import (
    LAUNCH_COMMAND_KEY,
    LINEAR_ATTN_BACKEND_KEY,
    MODEL_INFO_FULL,
    SPEC_ACCEPT_KEYS_RENAMED,
    STREAM_CHUNKS_MSGSPEC,
    Release,
    reported_version,
)
from ..sglang.resolution import effective_max_running, resolve
from . import text
from .config import SimConfig
from .engine import Engine, Job
from .faults import FaultPlan, in_burst
from .prefix_cache import PrefixCache
from .replies import load_replies
from .stats import Stats

MAX_TOTAL_NUM_TOKENS = 1_048_576


class Inflight:
    """One in-flight generation as `/abort_request` sees it: its decode job, and a way to wake it when aborted."""

    __slots__ = ("_wake", "aborted", "detached", "job")

    def __init__(self) -> None:
        self.aborted = False
        self.detached = False  # its client left and the decode goes on (--disconnect-check)
        self.job: Job | None = None
        self._wake: asyncio.Event | None = None  # made only by a request that actually waits

    def abort(self, engine: Engine | None) -> None:
        self.aborted = True
        if self.job is not None and engine is not None:
            engine.abort(self.job)
        if self._wake is not None:
            self._wake.set()

    async def pause(self, seconds: float | None) -> None:
        """Sleep `seconds` (None: for ever), returning early once the request is aborted."""
        if self.aborted:
            return
        if self._wake is None:
            self._wake = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake.wait()


class Sim:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.env = {**os.environ, **config.env}
        resolved = resolve(config.server_args(), config.version, self.env)
        self.warnings: list[str] = resolved.pop("_warnings", [])
        self.arch = str(resolved.pop("architecture") or architecture_of(config.model_path))
        self.resolved = resolved
        self.v = Release.of(config.version)
        self.context = int(resolved.get("context_length") or default_context_length(self.arch))
        self.served = str(resolved["served_model_name"])
        self.max_running = effective_max_running(
            {**resolved, "architecture": self.arch},
            config.version,
            self.env,
            memory_max_running=config.default_max_running_requests,
            memory_mamba=config.memory_mamba_cache_size,
        )
        self.engine: Engine | None = None
        if config.decode_tokens_per_s > 0:
            self.engine = Engine(
                max_running=self.max_running,
                decode_tokens_per_s=config.decode_tokens_per_s,
                max_queued=resolved.get("max_queued_requests"),
                batch_half=config.batch_half,
                prefill_tokens_per_s=config.prefill_tokens_per_s,
            )
        self.faults = FaultPlan.of(config.seed, config)
        self.replies = load_replies(config.replies) if config.replies else {}  # prompt → script (--replies)
        self.stats = Stats()
        self.old_shape = config.old_stream_shape or self.v < STREAM_CHUNKS_MSGSPEC
        self.spec = resolved.get("speculative_algorithm")
        self.spec_tokens = 0
        self.spec_verify = 0
        self.started = time.time()
        self.port = config.port
        self.listening_at: float | None = None  # monotonic time the port opened
        self.draining = False
        self.dead = False
        self.inflight: dict[str, Inflight] = {}  # by rid (the client's, or the generated id)
        self.orphans: set[asyncio.Task[None]] = set()  # decodes going on after their client left (--disconnect-check)
        self.prefix_cache = PrefixCache(0 if resolved.get("disable_radix_cache") else config.prefix_cache_tokens)
        self.on_die: Callable[[], None] | None = None
        self.on_down: Callable[[float], None] | None = None
        self.went_down = False
        self.warmed = False  # POST /_sim/ready: warm-up over now, whatever --warmup said (tests synchronise on it)
        self.health_probes = {200: 0, 503: 0}  # /health answers by status: what a client saw of the warm-up

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def healthy(self) -> bool:
        if self.draining or self.dead or self.listening_at is None:
            return False
        return self.warmed or time.monotonic() >= self.listening_at + self.config.warmup_s

    def in_503_burst(self) -> bool:
        """`--fail-503-every`: whether generation requests are refused with 503 right now."""
        opened = self.listening_at
        if opened is None or self.config.fail_503_every_s <= 0:
            return False
        return in_burst(time.monotonic() - opened, self.config.fail_503_every_s, self.config.fail_503_for_s)

    @property
    def counts_exactly(self) -> bool:
        """Whether a response-count limit is armed (each response is then sent in full before it is counted)."""
        return self.config.die_after is not None or (self.config.down_after is not None and not self.went_down)

    def count_response(self) -> None:
        self.stats.responses += 1
        limit = self.config.die_after
        if limit is not None and self.stats.responses >= limit and not self.dead:
            self.dead = True
            if self.on_die is not None:
                self.on_die()
        down = self.config.down_after
        if down is not None and self.stats.responses >= down and not self.went_down and not self.dead:
            self.went_down = True
            self.stats.faults["down"] += 1
            if self.on_down is not None:
                self.on_down(self.config.down_for_s)

    def abort(self, rid: str | None, abort_all: bool = False) -> None:
        """`/abort_request`: stop the named in-flight generation (or all); unknown rids are ignored, as in SGLang."""
        targets = list(self.inflight.values()) if abort_all else [self.inflight[rid]] if rid in self.inflight else []
        for inflight in targets:
            inflight.abort(self.engine)

    def log(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    # -- per request helpers ------------------------------------------------------------------------------------
    def cache_report(self, cached: int) -> int | None:
        """`usage.prompt_tokens_details.cached_tokens`: reported only with --enable-cache-report."""
        return cached if self.resolved.get("enable_cache_report") else None

    def spec_details(self, seed: int, tokens: int) -> dict[str, Any] | None:
        """Per-request speculative stats with SGLang's key names for the simulated version."""
        if not self.spec or tokens <= 0:
            return None
        draft = int(self.resolved.get("speculative_num_draft_tokens") or 4)
        mean = self.config.spec_accept_length or 1 + 0.6 * (draft - 1)
        jitter = ((seed >> 20) % 1000) / 1000 - 0.5
        accept = min(float(draft), max(1.0, mean + 0.6 * jitter))
        verify = max(1, math.ceil(tokens / accept))
        self.spec_tokens += tokens
        self.spec_verify += verify
        correct = tokens - verify
        rate = correct / (verify * (draft - 1)) if draft > 1 else 0.0
        if self.v < SPEC_ACCEPT_KEYS_RENAMED:
            return {
                "spec_accept_rate": rate,
                "spec_accept_length": tokens / verify,
                "spec_accept_token_num": correct,
                "spec_draft_token_num": verify * (draft - 1),
                "spec_verify_ct": verify,
                "spec_accept_histogram": None,
            }
        return {
            "spec_verify_ct": verify,
            "spec_accept_length": tokens / verify,
            "spec_accept_rate": rate,
            "spec_num_correct_drafts": correct,
            "spec_num_proposed_drafts": verify * (draft - 1),
            "spec_correct_drafts_histogram": None,
        }

    def avg_accept_length(self) -> float:
        return self.spec_tokens / self.spec_verify if self.spec_verify else 0.0

    # -- views --------------------------------------------------------------------------------------------------
    def running_waiting(self) -> tuple[int, int]:
        if self.engine is None:
            return self.stats.in_flight, 0
        return self.engine.num_running, self.engine.num_waiting

    def throughput(self) -> float:
        return self.engine.throughput() if self.engine is not None else 0.0

    def internal_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "last_gen_throughput": self.throughput(),
            "effective_max_running_requests_per_dp": self.max_running,
            "memory_usage": {"weight": 51.2, "kvcache": 18.4, "token_capacity": MAX_TOTAL_NUM_TOKENS, "graph": 1.1},
            "world_size": self.resolved.get("tp_size") or 1,
            "startup_time": self.started,
        }
        if self.spec:
            state["avg_spec_accept_length"] = self.avg_accept_length()
        return state

    def server_info(self) -> dict[str, Any]:
        """Every server arg of the emulated release at its resolved value, then the scheduler's facts.

        Keys follow the release's flag table (`pipeline.sglang.flags`): a flag's default unless it was given or
        resolved; what SGLang computes from GPU memory when unset (mem_fraction_static, chunked_prefill_size) gets a
        plausible stand-in."""
        args: dict[str, Any] = {flag.dest: flag.default for flag in flags_of(self.config.version).values()}
        args.pop("tensor_parallel_size", None), args.pop("data_parallel_size", None)
        args.pop("pipeline_parallel_size", None)
        args.update(mem_fraction_static=0.85, chunked_prefill_size=8192, dp_size=1, pp_size=1, stream_interval=1)
        args.update({k: v for k, v in self.resolved.items() if not k.startswith("_")})
        args.update(
            host=self.config.host,
            port=self.port,
            tokenizer_path=self.resolved.get("tokenizer_path") or self.config.model_path,
            api_key=None,  # never echoed by the simulator
            admin_api_key=None,
            random_seed=self.resolved.get("random_seed", self.config.seed),
            mamba_track_interval=self.resolved.get("mamba_track_interval", 256),
        )
        if self.v < LINEAR_ATTN_BACKEND_KEY:
            args.pop("linear_attn_backend", None)
        else:
            args.setdefault("linear_attn_backend", "triton")
            args["kv_events"] = None
        info: dict[str, Any] = {
            **args,
            "status": "ready",
            "max_total_num_tokens": MAX_TOTAL_NUM_TOKENS,
            "max_req_input_len": self.context - 1,
            "startup_time": self.started,
            "internal_states": [self.internal_state()],
            "version": reported_version(self.config.version),
        }
        if self.v >= LAUNCH_COMMAND_KEY:
            info.update(launch_command=self.launch_command(), frontend="python")
        return info

    def launch_command(self) -> str:
        argv = list(self.config.launch_argv)
        for i, arg in enumerate(argv[:-1]):
            if arg == "--api-key":
                argv[i + 1] = "***"
        return " ".join(["python3", "-m", "sglang.launch_server", *argv])

    def model_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "model_path": self.config.model_path,
            "tokenizer_path": self.config.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "qwen3_5" if "Qwen3_5" in self.arch else "qwen3",
            "architectures": [self.arch],
        }
        if self.v >= MODEL_INFO_FULL:
            info.update(
                served_model_name=self.served,
                load_format="auto",
                reasoning_parser=self.resolved.get("reasoning_parser"),
                tool_call_parser=self.resolved.get("tool_call_parser"),
                disaggregation_mode="null",
            )
        return info

    def model_card(self) -> dict[str, Any]:
        return {
            "id": self.served,
            "object": "model",
            "created": int(self.started),
            "owned_by": "sglang",
            "root": self.served,
            "parent": None,
            "max_model_len": self.context,
        }

    def loads(self) -> dict[str, Any]:
        running, waiting = self.running_waiting()
        load: dict[str, Any] = {
            "dp_rank": 0,
            "num_running_reqs": running,
            "num_waiting_reqs": waiting,
            "num_used_tokens": 0,
            "num_total_tokens": MAX_TOTAL_NUM_TOKENS,
            "max_running_requests": self.max_running,
            "token_usage": 0.0,
            "gen_throughput": self.throughput(),
            "cache_hit_rate": self.prefix_cache.hit_rate(),
            "utilization": running / self.max_running,
            "queues": {"waiting": waiting, "grammar": 0, "paused": 0, "retracted": 0, "prealloc_ready": 0},
        }
        if self.spec:
            load["speculative"] = {"accept_length": self.avg_accept_length(), "accept_rate": 0.0}
        return {
            "timestamp": datetime.now(UTC).isoformat(),
            "version": reported_version(self.config.version),
            "accelerator": "cuda",
            "num_accelerators": self.resolved.get("tp_size") or 1,
            "loads": [load],
        }

    def metrics(self) -> str:
        running, waiting = self.running_waiting()
        label = f'{{model_name="{self.served}"}}'
        gauges = {
            "num_running_reqs": running,
            "num_queue_reqs": waiting,
            "num_grammar_queue_reqs": 0,
            "gen_throughput": self.throughput(),
            "token_usage": 0.0,
            "num_used_tokens": 0,
            "cache_hit_rate": self.prefix_cache.hit_rate(),
            "spec_accept_length": self.avg_accept_length(),
            "spec_accept_rate": 0.0,
            "num_retracted_reqs": 0,
            "max_total_num_tokens": MAX_TOTAL_NUM_TOKENS,
            "context_len": self.context,
            "utilization": running / self.max_running,
        }
        counters = {
            "prompt_tokens_total": self.stats.prompt_tokens_total,
            "generation_tokens_total": self.stats.generation_tokens_total,
            "cached_tokens_total": self.prefix_cache.cached_tokens,
            "num_requests_total": self.stats.requests,
            "num_aborted_requests_total": self.stats.cancelled,
            "spec_verify_calls_total": self.spec_verify,
        }
        lines: list[str] = []
        for name, value in gauges.items():
            lines += [f"# HELP sglang:{name} {name}", f"# TYPE sglang:{name} gauge", f"sglang:{name}{label} {value}"]
        for name, value in counters.items():
            lines += [f"# HELP sglang:{name} {name}", f"# TYPE sglang:{name} counter", f"sglang:{name}{label} {value}"]
        return "\n".join(lines) + "\n"

    def plan_seed(self, messages: Any, sampling_key: tuple[Any, ...]) -> int:
        return text.digest(messages, sampling_key, self.config.seed)
