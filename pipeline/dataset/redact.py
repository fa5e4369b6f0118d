"""What an export must not reveal: the run's endpoint URLs and host names.

An export is published; the servers that produced it are not. `Hosts.of_run` collects every address the run knows:
the configured endpoint URLs, the URLs preflight recorded, the `endpoint` column of the committed rows (and of each
generated turn), and the config's bind hosts (`launch.host`, `output.metrics_host`), each as the full URL, its
`host:port` and its bare host. `public_config` turns the resolved config into one that can be shared (endpoint URLs
replaced by placeholders that fail loudly, bind hosts and the endpoints file left out), and `Hosts.scrub` replaces
any remaining mention in text the export writes itself (card, config). Users' own data (prompts, answers) is never
rewritten: `Hosts.find` says where it mentions one, so the caller can report it.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..store.files import readable_parts
from ..store.layout import PART_KINDS
from ..store.manifest import Manifest

PLACEHOLDER_URL = "http://endpoint-{n}.invalid"  # RFC 2606: `.invalid` never resolves, so a reuse fails at preflight
REDACTED = "<endpoint>"
_URL = re.compile(r"https?://[^\s\"'<>,]+")
_BIND_HOSTS = (("launch", "host"), ("output", "metrics_host"))


class Hosts:
    """A set of strings (URLs, host:port, hosts) that must not appear in an export."""

    def __init__(self, addresses: Iterable[str]) -> None:
        found: set[str] = set()
        for address in addresses:
            found |= _forms(address)
        self.strings = sorted(found, key=len, reverse=True)  # longest first: a URL before its host
        # whole names only: a host `c` must not turn "license" into "li<endpoint>ense" (a dot may follow: a sentence)
        alternatives = "|".join(re.escape(s) for s in self.strings)
        self._pattern = re.compile(rf"(?<![\w.-])(?:{alternatives})(?![\w-])") if self.strings else None

    @classmethod
    def of_run(cls, run_dir: Path, manifest: Manifest) -> Hosts:
        config = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
        assert isinstance(config, dict)
        addresses = [str(ep.get("url", "")) for ep in config.get("endpoints") or [] if isinstance(ep, dict)]
        for section, key in _BIND_HOSTS:
            value = (config.get(section) or {}).get(key)
            addresses.append(value if isinstance(value, str) else "")
        addresses += _urls_in(manifest.get("preflight"))  # endpoint and router-worker URLs
        addresses += _endpoint_column(run_dir)
        return cls(a for a in addresses if a and a != "sim")

    def scrub(self, text: str) -> str:
        return self._pattern.sub(REDACTED, text) if self._pattern else text

    def find(self, text: str) -> str | None:
        """The first address `text` mentions, or None."""
        match = self._pattern.search(text) if self._pattern else None
        return match.group(0) if match else None


def _forms(address: str) -> set[str]:
    """A URL, its `host:port` and its host; a bare host as it is."""
    parts = urllib.parse.urlsplit(address if "://" in address else f"//{address}")
    forms = {address.rstrip("/")}
    if parts.netloc:
        forms.add(parts.netloc.rsplit("@", 1)[-1])
    if parts.hostname:
        forms.add(parts.hostname)
    return {f for f in forms if f}


def _urls_in(value: Any) -> list[str]:
    """Every http(s) URL in a JSON value, at any depth."""
    if isinstance(value, str):
        return _URL.findall(value)
    if isinstance(value, dict):
        return [u for k, v in value.items() for u in _urls_in(k) + _urls_in(v)]
    if isinstance(value, list | tuple):
        return [u for v in value for u in _urls_in(v)]
    return []


_TURN_ENDPOINT = "endpoint"


def _leaves(turns: pa.DataType) -> list[str]:
    """The field names of a `turns` list's struct (none when it is not a list of structs)."""
    item = turns.value_type if pa.types.is_list(turns) else None
    return [item.field(i).name for i in range(item.num_fields)] if item is not None and pa.types.is_struct(item) else []


def _endpoint_column(run_dir: Path) -> list[str]:
    """Distinct `endpoint` values of every committed row and turn, read from those leaf columns alone (a file's
    `turns` read whole would bring its reasoning and answers: 1 GB for a merged file of 100K rows)."""
    seen: set[str] = set()
    for kind in PART_KINDS:
        for path in readable_parts(run_dir / kind):
            schema = pq.read_schema(path)
            columns = ["endpoint"] if "endpoint" in schema.names else []
            if "turns" in schema.names and _TURN_ENDPOINT in _leaves(schema.field("turns").type):
                columns.append(f"turns.list.element.{_TURN_ENDPOINT}")  # the leaf alone: not the turns' texts
            if not columns:
                continue
            table = pq.ParquetFile(path).read(columns=columns, use_threads=False)
            if "endpoint" in columns:
                seen.update(v for v in pc.unique(table.column("endpoint")).to_pylist() if v)
            if "turns" in columns:
                turns = pc.list_flatten(table.column("turns"))
                if len(turns):
                    seen.update(v for v in pc.unique(pc.struct_field(turns, "endpoint")).to_pylist() if v)
    return sorted(seen)


def public_config(config: dict[str, Any]) -> dict[str, Any]:
    """The resolved config without endpoint URLs, bind hosts, the endpoints file or the simulator's `--host`.

    Endpoint URLs become `http://endpoint-N.invalid` (so a reuse without `--endpoint URL` stops at preflight, never
    quietly sends elsewhere); the other keys are left out, so loading the file gives their defaults.
    """
    public = {k: (dict(v) if isinstance(v, dict) else v) for k, v in config.items()}
    endpoints = []
    for n, endpoint in enumerate(config.get("endpoints") or [], start=1):
        ep = dict(endpoint)
        if ep.get("url") != "sim":
            ep["url"] = PLACEHOLDER_URL.format(n=n)
        ep["sim_args"] = _without_host(ep.get("sim_args") or [])
        endpoints.append(ep)
    if "endpoints" in config:
        public["endpoints"] = endpoints
    public.pop("endpoints_file", None)
    for section, key in _BIND_HOSTS:
        if isinstance(public.get(section), dict):
            public[section].pop(key, None)
    return public


def _without_host(args: list[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--host":
            skip = True
        elif not arg.startswith("--host="):
            out.append(arg)
    return out


def public_preflight(preflight: Any) -> list[dict[str, Any]]:
    """Per endpoint (numbered, not named): release, whether it passed, its server facts (router workers counted,
    not named) and each check without its hint."""
    if not isinstance(preflight, dict):
        return []
    out = []
    for n, ep in enumerate(preflight.get("endpoints") or [], start=1):
        if not isinstance(ep, dict):
            continue
        checks = [
            {k: c.get(k) for k in ("name", "key", "expected", "actual", "ok")}
            for c in ep.get("checks") or []
            if isinstance(c, dict)
        ]
        info = {k: v for k, v in (ep.get("info") or {}).items() if k != "router_workers"}
        workers = (ep.get("info") or {}).get("router_workers")
        if workers:
            info["router_workers"] = len(workers)
        public = {"endpoint": n, "ok": ep.get("ok"), "version": ep.get("version"), "info": info, "checks": checks}
        out.append({k: v for k, v in public.items() if v not in (None, {}, [])})
    return out
