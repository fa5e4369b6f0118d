"""run.json under concurrent workers: every update is a locked read-modify-write, so no worker's entry is lost."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipeline.store.manifest import mark_simulated, read_manifest, simulated_endpoints, updating_manifest

UPDATER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from pipeline.store.manifest import updating_manifest
    run_dir, worker, rounds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    for i in range(rounds):
        with updating_manifest(run_dir) as manifest:
            counts = manifest.setdefault("counts", {})
            seen = counts.get(f"worker-{worker}", {}).get("updates", 0)
            time.sleep(0.002)  # a read-modify-write as long as a real one under load: without the lock, lost
            counts[f"worker-{worker}"] = {"updates": seen + 1}
    """
)


def test_workers_updating_at_once_keep_every_entry_and_every_update(tmp_path):
    workers, rounds = 4, 25
    procs = [
        subprocess.Popen([sys.executable, "-c", UPDATER, str(tmp_path), str(w), str(rounds)], cwd=Path.cwd())
        for w in range(workers)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * workers
    manifest = read_manifest(tmp_path)
    assert manifest is not None
    assert manifest["counts"] == {f"worker-{w}": {"updates": rounds} for w in range(workers)}


def test_nothing_is_written_when_the_update_fails(tmp_path):
    with updating_manifest(tmp_path) as manifest:
        manifest["counts"] = {"worker-0": {"done": 1}}
    with pytest.raises(RuntimeError), updating_manifest(tmp_path) as manifest:
        manifest["counts"] = {}
        raise RuntimeError("refused midway")
    assert read_manifest(tmp_path) == {"counts": {"worker-0": {"done": 1}}}


def test_the_simulated_mark_is_kept_and_read_from_older_runs():
    """`simulated_endpoints` only grows (the simulator's rows stay in the run), and a run.json written before the
    mark existed is a simulator run when its config names `url = "sim"`."""
    old = {"config": {"endpoints": [{"url": "sim"}, {"url": "http://gpu:30000"}]}}
    assert simulated_endpoints(old) == ["sim"]
    assert simulated_endpoints({"config": {"endpoints": [{"url": "http://gpu:30000"}]}}) == []
    manifest: dict = {"config": {"endpoints": [{"url": "http://gpu:30000"}]}}
    mark_simulated(manifest, [])
    assert (manifest["simulated"], manifest["simulated_endpoints"]) == (False, [])
    mark_simulated(manifest, ["http://127.0.0.1:4000"])
    mark_simulated(manifest, [])  # a resume against real servers
    assert (manifest["simulated"], simulated_endpoints(manifest)) == (True, ["http://127.0.0.1:4000"])
