"""engine/memory.py: the process settings of a run, and what they leave behind in an interpreter that goes on."""

import importlib
import sys

import pytest

from pipeline.engine.memory import tuned_for_run


def test_pandas_is_blocked_during_a_run_and_importable_after_it(monkeypatch):
    # as in a fresh `regen run` process, where nothing imported pandas yet
    for name in [n for n in sys.modules if n == "pandas" or n.startswith("pandas.")]:
        monkeypatch.delitem(sys.modules, name)
    hooks = list(sys.meta_path)
    with tuned_for_run():
        with pytest.raises(ModuleNotFoundError, match="not used by `regen run`"):
            importlib.import_module("pandas")
    assert sys.meta_path == hooks  # `regen run` called in-process (tests, a notebook) leaves `datasets` working
