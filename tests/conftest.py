"""Shared fixtures: real simulator subprocesses on 127.0.0.1 (`sim`) and a tiny chat-template tokenizer
(`tokenizer_dir`). What tests share besides fixtures lives in tests/helpers/, which test modules import; they never
import this file (tests/test_tests_layout.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers.processes import SimProcess


@pytest.fixture
def sim() -> Iterator[Callable[..., SimProcess]]:
    started: list[SimProcess] = []

    def start(*args: str) -> SimProcess:
        proc = SimProcess(list(args))
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Qwen3-style tokenizer of tests/helpers/tokenizer.py in a folder, built once per test module."""
    from tests.helpers.tokenizer import save_tokenizer  # here: importing it skips where transformers is absent

    return save_tokenizer(tmp_path_factory.mktemp("tokenizer"))
