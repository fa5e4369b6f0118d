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
- repeated declarations (issue 39): what is declared twice where one place should own it (`repeated_declarations`)
- release strings: string literals and f-string parts (docstrings aside) naming an SGLang release such as `0.5.14`,
  outside the release-facts package and the simulator
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


def repeated_declarations(root: Path) -> list[str]:
    """Declarations written twice where one place should own them (issue 39, item 5). Each finding names the place
    and, after the colon, how many names or statements it repeats; none is left when each has one owner:

    - fault fields: `p_*` fields annotated in a class of both sim/config.py and sim/faults.py;
    - column lists: a list or tuple literal of 3+ strings, all schema.py column names, in inspection/sample.py or
      store/quarantine.py (typed by hand instead of derived from schema.py);
    - Completion/Turn: 3+ field names annotated in both classes' own bodies; a `Turn.of` passing 3+ positional args;
    - dataclass to dict by hand: a dict literal of 5+ entries, every one `"name": x.name` of one `x` (outside sim/);
    - twin handlers: two `except` clauses of one `try` sharing 3+ identical statements, a bare return aside (outside
      sim/)."""
    pkg = root / "pipeline"

    def parse(rel: str) -> ast.Module:
        path = pkg / rel
        return ast.parse(path.read_text()) if path.exists() else ast.Module(body=[], type_ignores=[])

    def annotated(classes: list[ast.ClassDef]) -> set[str]:
        body = [s for c in classes for s in c.body if isinstance(s, ast.AnnAssign)]
        return {s.target.id for s in body if isinstance(s.target, ast.Name) and s.target.id != "_"}

    def classes(module: ast.Module, *names: str) -> list[ast.ClassDef]:
        return [n for n in ast.walk(module) if isinstance(n, ast.ClassDef) and (not names or n.name in names)]

    def strings(node: ast.AST) -> list[str]:
        elts = node.elts if isinstance(node, ast.List | ast.Tuple) else []
        return [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]

    out = []
    faults = annotated(classes(parse("sim/config.py"))) & annotated(classes(parse("sim/faults.py")))
    if faulty := sorted(name for name in faults if name.startswith("p_")):
        out.append(f"fault fields annotated in both sim/config.py and sim/faults.py: {len(faulty)}")

    schema = list(ast.walk(parse("schema.py")))
    columns = {n.args[0].value for n in schema if isinstance(n, ast.Call) and n.args and strings(ast.List([n.args[0]]))}
    columns |= {n.elts[0].value for n in schema if isinstance(n, ast.Tuple) and len(n.elts) == 2 and strings(n)[:1]}
    for rel in ("inspection/sample.py", "store/quarantine.py"):
        for n in ast.walk(parse(rel)):
            names = strings(n)
            if len(names) >= 3 and len(names) == len(getattr(n, "elts", ())) and set(names) <= columns:
                out.append(f"column list typed by hand at pipeline/{rel}:{n.lineno}: {len(names)}")

    files = _files(root, "sim/")
    records = [c for path in files for c in classes(ast.parse(path.read_text()), "Completion", "Turn")]
    turns = [c for c in records if c.name == "Turn"]
    shared = annotated(turns) & annotated([c for c in records if c.name == "Completion"])
    if len(shared) >= 3:
        out.append(f"fields annotated in both Completion and Turn: {len(shared)}")
    of = [f for c in turns for f in c.body if isinstance(f, ast.FunctionDef) and f.name == "of"]
    if (positional := max((len(n.args) for f in of for n in ast.walk(f) if isinstance(n, ast.Call)), default=0)) >= 3:
        out.append(f"Turn.of copies by position: {positional}")

    for path in files:
        rel = path.relative_to(root)
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.Dict) and len(n.keys) >= 5:
                pairs = [(k, v) for k, v in zip(n.keys, n.values, strict=True) if isinstance(v, ast.Attribute)]
                owners = {ast.dump(v.value) for k, v in pairs if isinstance(k, ast.Constant) and k.value == v.attr}
                if len(pairs) == len(n.keys) and len(owners) == 1:
                    out.append(f"dataclass to dict by hand at {rel}:{n.lineno}: {len(pairs)}")
            if isinstance(n, ast.Try):
                bare = (ast.dump(ast.Return()), ast.dump(ast.Return(ast.Constant(None))))
                bodies = [{ast.dump(s) for s in h.body} - set(bare) for h in n.handlers]
                for i, a in enumerate(bodies):
                    for b in bodies[i + 1 :]:
                        if len(a & b) >= 3:
                            out.append(f"twin except clauses at {rel}:{n.lineno}: {len(a & b)}")
    return out


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
        "pool": class_size(root, "endpoints/pool.py", "Pool"),
        "runner": {**class_size(root, "engine/runner.py", "Runner"), "module_lines": _lines(root, "engine/runner.py")},
        "mypy_mode": mypy_mode(root),
        "test_modules_imported_by_tests": test_modules_imported_by_tests(root),
        "private_cross_imports": private_cross_imports(root),
        "export_run_params": export_run_params(root),
        "repeated_declarations": repeated_declarations(root),
        "release_strings_outside_sglang": release_strings_outside_sglang(root),
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
