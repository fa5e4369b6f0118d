"""The renovation's measures (issue 26), read off a checkout with `ast` and `grep`-like scans, nothing imported:

    python scripts/tree_measures.py                 # this checkout
    python scripts/tree_measures.py --root /tmp/old # another one (a `git worktree add` of an older commit)
    python scripts/tree_measures.py --before /tmp/old   # the before/after table

- version tuples: bare `(0, N, M)` literals outside the release-facts package (pipeline/sglang/)
- version parsers: functions whose name says they parse or compare a version, outside pipeline/sglang/
- HTTP stacks: modules outside the simulator that import an HTTP client library or read its exceptions
- `dict[str, Any]` in signatures: annotated parameters and returns outside the simulator
- run-directory literals: paths built from a written-out run-directory name, outside store/layout.py and the simulator
- Pool, Runner: the lines and methods of `class Pool` (endpoints/pool.py) and `class Runner` (engine/runner.py)
- mypy mode: `strict` or the checks pyproject.toml's `[tool.mypy]` turns on, and the modules left out of strict
- test modules imported by tests: imports, in tests/, of a `test_*` module or of a conftest (`file:line module`)
- private cross imports: `from X import _name` in pipeline/ or regen/ where X is another module (issue 39)
- export entry point parameters: how many the export entry point takes (dataset/exporters.py `export`; before the
  registry, dataset/export.py `export_run`)
With `--before OLD`, a markdown table of OLD's measures against this checkout's.
The import graph (circles, upward imports) is scripts/import_graph.py's.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from pathlib import Path
from typing import Any

RUN_DIR_PATH = re.compile(  # tests/test_architecture.py's rule
    r'/ ["\'](shards|rejects|journal|locks|metrics|heartbeats|damaged|run\.json)["\']'
    r'|["\'](shards|rejects|journal)/["\']'
    r"|'(shards|rejects)' if .* else '(shards|rejects)'"
)
VERSION_TUPLE = re.compile(r"\(\s*0\s*,\s*\d+\s*,\s*\d+\s*\)")
VERSION_FUNC = re.compile(r"(parse|read|as|to)_?version|version_?(tuple|of|key)|_release_of|parse_release", re.I)
HTTP_IMPORT = re.compile(r"^\s*(import|from) (aiohttp|httpx|httptools|h11|requests|urllib3)\b", re.M)
HTTP_EXCEPTION = re.compile(r"\b(aiohttp|httpx)\.\w*(Error|Exception|Timeout)")


def _files(root: Path, *skip: str) -> list[Path]:
    pkg = root / "pipeline"
    return sorted(p for p in pkg.rglob("*.py") if not any(p.relative_to(pkg).as_posix().startswith(s) for s in skip))


def version_tuples(root: Path) -> int:
    return sum(len(VERSION_TUPLE.findall(p.read_text())) for p in _files(root, "sglang/"))


def version_parsers(root: Path) -> list[str]:
    out = []
    for path in _files(root, "sglang/"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and VERSION_FUNC.search(node.name):
                out.append(f"{path.relative_to(root)}:{node.name}")
    return out


def http_error_maps(root: Path) -> list[str]:
    """Modules that touch an HTTP client library: import it, or read its exceptions (the object store's botocore is
    its own stack, store/objects.py, and is left out)."""
    out = []
    for path in _files(root, "sim/"):
        text = path.read_text()
        if HTTP_IMPORT.search(text) or HTTP_EXCEPTION.search(text):
            out.append(str(path.relative_to(root)))
    return out


def dict_any_in_signatures(root: Path) -> int:
    count = 0
    for path in _files(root, "sim/"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            args = node.args
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
            notes = [a.annotation for a in every if a is not None and a.annotation is not None]
            notes += [node.returns] if node.returns is not None else []
            count += sum(ast.unparse(n).count("dict[str, Any]") for n in notes)
    return count


def run_dir_literals(root: Path) -> list[str]:
    """Paths built from a run-directory name written out (`run_dir / "shards"`, `f"rejects/{name}"`)."""
    out = []
    for path in _files(root, "sim/", "store/layout.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if RUN_DIR_PATH.search(line):
                out.append(f"{path.relative_to(root)}:{n}")
    return out


def class_size(root: Path, module: str, name: str) -> dict[str, int]:
    path = root / "pipeline" / module
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef) and node.name == name:
            methods = [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
            return {"lines": (node.end_lineno or node.lineno) - node.lineno + 1, "methods": len(methods)}
    return {"lines": 0, "methods": 0}


def test_modules_imported_by_tests(root: Path) -> list[str]:
    """Imports, anywhere under tests/, of a test module (its last dotted part starts with `test_`) or of a conftest
    (`file:line module`): tests share tests/helpers/ and conftest fixtures, never each other (the rule of
    tests/test_tests_layout.py)."""

    def is_test_module(dotted: str) -> bool:
        parts = dotted.split(".")
        return parts[-1].startswith("test_") or "conftest" in parts

    out = []
    for path in sorted((root / "tests").rglob("*.py")):
        found = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                named = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = "." * node.level + (node.module or "")
                if module.endswith(".") or module in ("tests", "tests.integration", "tests.real"):
                    # `from tests import test_x`, `from . import conftest`: the names imported are modules
                    sep = "" if module.endswith(".") else "."
                    named = [f"{module}{sep}{a.name}" for a in node.names]
                else:
                    named = [module]
            else:
                continue
            found += [(node.lineno, name) for name in named if is_test_module(name)]
        out += [f"{path.relative_to(root)}:{line} {name}" for line, name in sorted(found, key=lambda f: f[0])]
    return out


def private_cross_imports(root: Path) -> list[str]:
    """`from X import _name` (relative or absolute) in pipeline/ or regen/ where X is not the importing module: a
    private name used by another module, which should be public or live in the module that uses it."""
    out = []
    for package in ("pipeline", "regen"):
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            here = parts[:-1] if is_package else parts
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ImportFrom):
                    continue
                if node.level:
                    base = here if is_package else here[:-1]
                    base = base[: len(base) - node.level + 1]
                    source = ".".join([*base, *(node.module.split(".") if node.module else [])])
                else:
                    source = node.module or ""
                for alias in node.names:
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    if private and source != ".".join(here):
                        out.append(f"{path.relative_to(root)}:{node.lineno}: from {source} import {alias.name}")
    return out


EXPORT_ENTRY_POINTS = (("pipeline/dataset/exporters.py", "export"), ("pipeline/dataset/export.py", "export_run"))


def export_run_params(root: Path) -> int:
    """The parameters of the export entry point (all kinds: positional, keyword-only, *args, **kwargs), the first of
    EXPORT_ENTRY_POINTS the checkout has; 0 when it has none."""
    for relative, name in EXPORT_ENTRY_POINTS:
        path = root / relative
        if not path.is_file():
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                a = node.args
                return len([*a.posonlyargs, *a.args, *a.kwonlyargs]) + (a.vararg is not None) + (a.kwarg is not None)
    return 0


def measure(root: Path) -> dict[str, Any]:
    return {
        "version_tuples_outside_sglang": version_tuples(root),
        "version_parsers_outside_sglang": version_parsers(root),
        "modules_mapping_http_errors": http_error_maps(root),
        "dict_str_any_in_signatures": dict_any_in_signatures(root),
        "run_dir_literals_outside_layout": run_dir_literals(root),
        "pool": class_size(root, "endpoints/pool.py", "Pool"),
        "runner": {**class_size(root, "engine/runner.py", "Runner"), "module_lines": _lines(root, "engine/runner.py")},
        "mypy_mode": mypy_mode(root),
        "test_modules_imported_by_tests": test_modules_imported_by_tests(root),
        "private_cross_imports": private_cross_imports(root),
        "export_run_params": export_run_params(root),
    }


def _lines(root: Path, module: str) -> int:
    return len((root / "pipeline" / module).read_text().splitlines())


def mypy_mode(root: Path) -> str:
    """`strict`, or the checks `[tool.mypy]` turns on one by one (pyproject.toml), with the overrides' modules."""
    import tomllib

    conf = tomllib.loads((root / "pyproject.toml").read_text()).get("tool", {}).get("mypy", {})
    mode = "strict" if conf.get("strict") else ", ".join(k for k, v in conf.items() if v is True) or "default"
    lenient = [m for o in conf.get("overrides", []) for m in ([o["module"]] if isinstance(o["module"], str)
               else o["module"]) if o.get("strict") is False or o.get("ignore_errors")]  # fmt: skip
    return mode + (f" (not strict: {', '.join(lenient)})" if lenient else "")


def table(before: dict[str, Any], after: dict[str, Any]) -> str:
    """A markdown table of two checkouts' measures, lists shown by their length."""

    def shown(value: Any) -> str:
        if isinstance(value, list):
            return str(len(value))
        if isinstance(value, dict):
            return ", ".join(f"{k} {v}" for k, v in value.items())
        return str(value)

    rows = ["| measure | before | after |", "|---|---|---|"]
    for key in after:
        rows.append(f"| {key} | {shown(before.get(key, '-'))} | {shown(after[key])} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent, help="a checkout")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--before", type=Path, help="another checkout: print a before/after markdown table")
    args = parser.parse_args(argv)
    result = measure(args.root)
    if args.before:
        print(table(measure(args.before), result))
        return 0
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for key, value in result.items():
        shown = len(value) if isinstance(value, list) else value
        print(f"{key}: {shown}")
        if isinstance(value, list):
            print("".join(f"  {item}\n" for item in value), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
