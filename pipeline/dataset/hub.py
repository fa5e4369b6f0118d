"""Publish an export folder as a Hugging Face Hub dataset repository.

`push_to_hub` creates the repository (or finds it) and uploads the folder: README.md (whose front matter the Hub
reads: configs, features, license), regen-config.toml and data/. Uploads resume: with huggingface_hub 0.25 to 1.x
through `upload_large_folder` (per-file state kept under the folder's `.cache/huggingface/`), from 2.0 through
`upload_folder`, which resumes and splits large folders into several commits itself. The token comes from
`HF_TOKEN` (or the library's saved login), the Hub's address from `HF_ENDPOINT` (a mirror or a private Hub; read
when pushing, not when the library was imported). `api` is the seam: an `HfApi` pointed at another endpoint, or
any object with the same `create_repo` / `upload_*` methods. A run of the simulator is not published unless asked
(`refuse_simulated`, checked before the export is written).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InputError, OutputError, RegenError
from ..store.manifest import manifest_or_empty, simulated_endpoints

REPO_TYPE = "dataset"
_IGNORE = [".*.tmp", "**/.*.tmp"]  # an interrupted export's temp files, never data


def refuse_simulated(run_dir: Path, *, allow: bool = False) -> None:
    """A run of regen's simulator holds filler text, not a model's completions: publishing it is refused (InputError)
    unless `allow` (`--allow-simulated`, for a demo or a test of the upload)."""
    sims = simulated_endpoints(manifest_or_empty(run_dir))
    if sims and not allow:
        raise InputError(
            f"{run_dir} is a simulator run (endpoints {', '.join(sims)}): its completions are filler text, not model "
            "output; refusing to push it to the Hub. Pass --allow-simulated to publish it anyway"
        )


def push_to_hub(folder: Path, repo_id: str, *, private: bool = False, token: str | None = None, api: Any = None) -> str:
    """Upload `folder` to the dataset repository `repo_id` (ORG/NAME); returns the repository's URL."""
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ConfigError(f"--push-to-hub wants ORG/NAME, got {repo_id!r}")
    if not (folder / "README.md").is_file():
        raise OutputError(f"{folder}: no README.md; push an export folder (regen export ... --out DIR)")
    if api is None:
        from huggingface_hub import HfApi  # only publishing needs it

        endpoint = os.environ.get("HF_ENDPOINT") or None
        api = HfApi(endpoint=endpoint, token=token or os.environ.get("HF_TOKEN") or None)
    try:
        url = api.create_repo(repo_id, repo_type=REPO_TYPE, private=private, exist_ok=True)
        large = getattr(api, "upload_large_folder", None)
        if large is not None:
            large(repo_id=repo_id, folder_path=folder, repo_type=REPO_TYPE, private=private, ignore_patterns=_IGNORE)
        else:
            api.upload_folder(
                repo_id=repo_id,
                folder_path=folder,
                repo_type=REPO_TYPE,
                commit_message="regen export",
                ignore_patterns=_IGNORE,
            )
    except RegenError:
        raise
    except Exception as exc:
        # The library's errors depend on its version and transport (requests, httpx, httpx2; HfHubHTTPError is an
        # OSError, a refused connection may not be): whatever stops the upload is one OutputError naming the repo.
        raise OutputError(f"uploading {folder} to the Hub dataset {repo_id} failed: {exc}") from exc
    return str(url)
