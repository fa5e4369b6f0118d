"""The tests' own shape: a test module imports tests/helpers/ and uses the fixtures of a conftest, never another test
module or a conftest. A test module imported elsewhere is loaded twice under two names (pytest's `test_x` and the
importer's `tests.test_x`), its module-level skips and fixtures leak into the importer, and moving one test breaks
another. The rule is scripts/tree_measures.py's `test_modules_imported_by_tests` (`ast`, nothing imported)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from tests.helpers.paths import ROOT


def _load_measures() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tree_measures", ROOT / "scripts" / "tree_measures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


measures = _load_measures()


def test_no_test_module_imports_another_test_module_or_a_conftest() -> None:
    found = measures.test_modules_imported_by_tests(ROOT)
    assert found == [], "move what is shared into tests/helpers/ (public names) or a conftest fixture:\n" + "\n".join(
        found
    )


def test_the_rule_sees_every_way_of_importing_a_test_module(tmp_path: Path) -> None:
    forbidden = [
        "from test_inspection import row",
        "from tests.test_audit import write_planted",
        "from tests.integration.test_run import _config",
        "from integration.test_run import _config",
        "from .test_pool import endpoint",
        "from tests.conftest import ROOT",
        "from conftest import regen",
        "from tests import test_pool",
        "from tests.integration import test_run, conftest",
        "import tests.test_pool",
        "import test_pool as pool",
        "    from tests.test_inspection import build_run",  # inside a function
    ]
    allowed = [
        "from tests.helpers import assert_exactly_once",
        "from tests.helpers.inspection_runs import build_run",
        "from tests.objectstore import serve_s3",
        "from pipeline.store import test_hooks",
        "import pytest",
    ]
    (tmp_path / "tests" / "integration").mkdir(parents=True)
    body = "".join(
        f"def f{n}():\n{line}\n" if line.startswith(" ") else f"{line}\n" for n, line in enumerate(forbidden)
    )
    (tmp_path / "tests" / "integration" / "test_x.py").write_text(body + "\n".join(allowed) + "\n")
    found = measures.test_modules_imported_by_tests(tmp_path)
    assert [entry.split(" ", 1)[1] for entry in found] == [
        "test_inspection",
        "tests.test_audit",
        "tests.integration.test_run",
        "integration.test_run",
        ".test_pool",
        "tests.conftest",
        "conftest",
        "tests.test_pool",
        "tests.integration.test_run",
        "tests.integration.conftest",
        "tests.test_pool",
        "test_pool",
        "tests.test_inspection",
    ]
