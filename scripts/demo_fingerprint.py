"""The demo's fingerprint: what regen sends and what it stores, as hashes to compare two checkouts (issue 39's
"request bodies and stored rows stay byte-identical on the demo").

    python scripts/demo_fingerprint.py                      # this checkout, the demo and the sample conversations
    python scripts/demo_fingerprint.py --root /tmp/old      # another checkout (a `git worktree add` of an older commit)
    python scripts/demo_fingerprint.py --keep /tmp/fp       # also keep the request bodies and the rows, to diff

It starts the demo's simulator (configs/demo.toml's `sim_args`, faults and all) behind a recording proxy on
127.0.0.1, runs `regen run configs/demo.toml --endpoint PROXY` over each input, then hashes:
- `requests`: every generation request body as sent (bytes, less the sequence number that ends each `rid`), sorted,
  so the order of arrival does not count;
- `rows`: every stored row of shards/ and rejects/, sorted by id, less what a run cannot repeat (`latency_s`,
  `created_at`, and the endpoint's URL, which is the proxy's port).
Each input runs `--runs` times (default 2) to show that the fingerprint is a property of the code, not of the run.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import tomllib
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from aiohttp import ClientSession, ClientTimeout, web

HERE = Path(__file__).resolve().parent.parent
RID_SEQ = re.compile(rb'("rid":\s*"[^"]*)-[0-9a-f]+"')  # a request id ends in a sequence number or a uuid
VOLATILE = {"latency_s", "created_at", "endpoint"}
INPUTS = ("data/sample_prompts.jsonl", "data/sample_conversations.jsonl")


class Recorder:
    """A reverse proxy on 127.0.0.1 that forwards everything to `upstream` and keeps each POST body."""

    def __init__(self, upstream: str) -> None:
        self.upstream, self.bodies, self.url = upstream, [], ""
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        threading.Thread(target=self._serve, daemon=True).start()
        self._ready.wait(30)

    def _serve(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self._start())
        self._ready.set()
        self._loop.run_forever()

    async def _start(self) -> None:
        self._session = ClientSession(timeout=ClientTimeout(total=600))
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.method == "POST" and not request.path.startswith("/_sim"):
            self.bodies.append(request.path.encode() + b" " + RID_SEQ.sub(rb'\1-N"', body))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        async with self._session.request(
            request.method, self.upstream + request.path_qs, data=body, headers=headers
        ) as up:
            out = web.StreamResponse(status=up.status, headers={"Content-Type": up.headers.get("Content-Type", "")})
            await out.prepare(request)
            async for chunk in up.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out

    def take(self) -> list[bytes]:
        bodies, self.bodies = self.bodies, []
        return bodies


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for part in ("shards", "rejects"):
        for path in sorted((run_dir / part).glob("*.parquet")):
            for row in pq.read_table(path).to_pylist():
                row = {k: v for k, v in row.items() if k not in VOLATILE}
                for turn in row.get("turns") or []:
                    for key in VOLATILE & set(turn):
                        turn.pop(key)
                rows.append({"_part": part, **row})
    return sorted(rows, key=lambda r: (r["_part"], r["id"]))


def _sha(items: list[bytes]) -> str:
    h = hashlib.sha256()
    for item in items:
        h.update(len(item).to_bytes(8, "little") + item)
    return h.hexdigest()[:16]


def fingerprint(root: Path, runs: int, keep: Path | None) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cfg = tomllib.loads((root / "configs/demo.toml").read_text())
    sim_args = cfg["endpoints"][0]["sim_args"]
    out: dict[str, Any] = {"root": str(root)}
    for source in INPUTS:
        seen = []
        for n in range(runs):
            bodies, rows = _run(root, env, sim_args, source)
            seen.append({"requests": _sha(bodies), "n_requests": len(bodies), "rows": _sha(rows), "n_rows": len(rows)})
            if keep is not None and n == 0:
                stem = keep / Path(source).stem
                stem.mkdir(parents=True, exist_ok=True)
                (stem / "requests.jsonl").write_bytes(b"\n".join(bodies) + b"\n")
                (stem / "rows.jsonl").write_bytes(b"\n".join(rows) + b"\n")
        out[source] = {**seen[0], "repeatable": all(s == seen[0] for s in seen)}
    return out


def _run(root: Path, env: dict[str, str], sim_args: list[str], source: str) -> tuple[list[bytes], list[bytes]]:
    """One run on a simulator of its own (its faults and text are drawn from its seed from the start)."""
    sim = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "sim", "--port", "0", *sim_args],
        cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert sim.stdout is not None
        proxy = Recorder(sim.stdout.readline().strip())
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = Path(tmp) / "run"
            argv = [sys.executable, "-m", "pipeline", "run", "configs/demo.toml", "--endpoint", proxy.url]
            argv += ["--input", source, "--output", str(run_dir), "--no-progress"]
            done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"{source}: regen run exited {done.returncode}:\n{done.stderr[-3000:]}")
            rows = [json.dumps(r, sort_keys=True, default=str).encode() for r in _rows(run_dir)]
        return sorted(proxy.take()), rows
    finally:
        sim.kill()
        sim.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=HERE, help="a checkout")
    ap.add_argument("--runs", type=int, default=2, help="runs per input (to show the fingerprint repeats)")
    ap.add_argument("--keep", type=Path, help="write each input's request bodies and rows here")
    args = ap.parse_args()
    print(json.dumps(fingerprint(args.root.resolve(), args.runs, args.keep), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
