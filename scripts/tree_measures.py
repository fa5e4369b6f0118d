"""The renovation's measures (issue 26), read off a checkout with `ast` and `grep`-like scans, nothing imported:

    python scripts/tree_measures.py                 # this checkout
    python scripts/tree_measures.py --root /tmp/old # another one (a `git worktree add` of an older commit)

- version tuples: bare `(0, N, M)` literals outside the release-facts package (pipeline/sglang/)
- version parsers: functions whose name says they parse or compare a version, outside pipeline/sglang/
- HTTP stacks: modules outside the simulator that import an HTTP client library or read its exceptions
- `dict[str, Any]` in signatures: annotated parameters and returns outside the simulator
- run-directory literals: paths built from a written-out run-directory name, outside store/layout.py and the simulator
- Pool: the lines and methods of `class Pool` (endpoints/pool.py)
- release strings: string literals and f-string parts (docstrings aside) naming an SGLang release such as `0.5.14`,
  outside the release-facts package and the simulator
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


def pool_size(root: Path) -> dict[str, int]:
    path = root / "pipeline" / "endpoints" / "pool.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef) and node.name == "Pool":
            methods = [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
            return {"lines": (node.end_lineno or node.lineno) - node.lineno + 1, "methods": len(methods)}
    return {"lines": 0, "methods": 0}


# A release such as 0.5.14 or 0.5.10.post1, not an address (127.0.0.1, 0.0.0.0).
RELEASE = re.compile(r"(?<![\w.])0\.\d+\.\d+(?!\.?\d)")


def release_strings_outside_sglang(root: Path) -> list[str]:
    """String literals and f-string parts that write out a release (`"... on 0.5.14"`), as file:line, outside
    pipeline/sglang/ (which owns them) and pipeline/sim/. Docstrings are documentation, and `__version__` is
    regen's own version: neither is counted."""
    out = []
    for path in _files(root, "sglang/", "sim/"):
        tree = ast.parse(path.read_text())
        skip = set()
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body:
                if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                    skip.add(id(body[0].value))
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__version__" for t in node.targets):
                skip.add(id(node.value))
        lines = [
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
            if RELEASE.search(node.value)
        ]
        out += [f"{path.relative_to(root)}:{n}" for n in sorted(lines)]  # one entry per literal
    return out


def measure(root: Path) -> dict[str, Any]:
    return {
        "version_tuples_outside_sglang": version_tuples(root),
        "version_parsers_outside_sglang": version_parsers(root),
        "modules_mapping_http_errors": http_error_maps(root),
        "dict_str_any_in_signatures": dict_any_in_signatures(root),
        "run_dir_literals_outside_layout": run_dir_literals(root),
        "pool": pool_size(root),
        "release_strings_outside_sglang": release_strings_outside_sglang(root),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent, help="a checkout")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = measure(args.root)
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
