"""Where the tests find things: the checkout (`ROOT`), the real data beside it (`SHARED`, with `needs_shared` to
skip where it is absent) and the files kept under tests/fixtures/."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
# The real test data beside the repository (datasets/, traces/): CI has it; a user's clone may not.
# REGEN_SHARED points elsewhere (set it to a missing folder to see what a clone without it runs).
SHARED = Path(os.environ.get("REGEN_SHARED") or ROOT.parent / "shared")
SPECFORGE = ROOT / "tests" / "fixtures" / "specforge"


def needs_shared(*parts: str) -> pytest.MarkDecorator:
    """Skip, saying what is missing, where ../shared/<parts> is absent; never in CI (CI=true), where it must be."""
    path = SHARED.joinpath(*parts)
    missing = not path.exists() and not os.environ.get("CI")
    return pytest.mark.skipif(missing, reason=f"{path} is absent: these tests read the real data there (CI has it)")
