#!/usr/bin/env python3
"""The import graph of the `pipeline` package, read with `ast` (nothing is imported), and the layer rules it obeys.

    python scripts/import_graph.py                 # summary: counts, package arrows, circles, upward imports
    python scripts/import_graph.py --modules       # + every module -> module arrow
    python scripts/import_graph.py --root /tmp/old # another checkout (e.g. `git worktree add /tmp/old 614a7d8`)
    python scripts/import_graph.py --json
    python scripts/import_graph.py --type-only     # imports under `if TYPE_CHECKING:` count as arrows too

An arrow is one `import`/`from ... import` of a pipeline module by another, counted once per (importer, imported)
pair; imports inside functions count (they are dependencies all the same) and are shown apart; imports under
`if TYPE_CHECKING:` do not, unless `--type-only` says so (the layer rules hold either way). A package's `__init__`
is not an arrow target for its own submodules' imports of siblings. `LAYERS` and `MAY_IMPORT` below are the table
of docs/architecture.md; tests/test_architecture.py holds the tree to them. Exit status: 1 when there is a circle
or an upward import, else 0.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACKAGE = "pipeline"
SHARED = ("errors", "config", "records", "schema", "validator", "conversation", "loops")

# Layer of each unit (a subpackage, or "shared" for the leaf modules at the top); a unit may import its own layer's
# units only where MAY_IMPORT says so, and lower layers freely within MAY_IMPORT.
LAYERS: dict[str, int] = {
    "shared": 0,
    "sglang": 0,  # SGLang's releases: a leaf that imports nothing of regen
    "store": 1,
    "endpoints": 1,
    "sim": 1,
    "server": 2,
    "inputs": 2,
    "dataset": 3,
    "inspection": 3,
    "engine": 4,
    "cli": 5,
    "api": 5,  # pipeline/__init__.py and __main__.py: the public facade
}
MAY_IMPORT: dict[str, frozenset[str]] = {
    "shared": frozenset({"shared"}),
    "sglang": frozenset({"sglang"}),
    "store": frozenset({"shared"}),
    "endpoints": frozenset({"shared", "sglang"}),
    "sim": frozenset({"shared", "sglang"}),
    "server": frozenset({"shared", "sglang", "endpoints"}),
    "inputs": frozenset({"shared", "store"}),
    "dataset": frozenset({"shared", "store", "inputs"}),
    "inspection": frozenset({"shared", "store"}),
    "engine": frozenset({"shared", "sglang", "store", "endpoints", "server", "inputs", "dataset"}),
    "cli": frozenset(
        {"shared", "sglang", "store", "endpoints", "sim", "server", "inputs", "dataset", "inspection", "engine"}
    ),
    "api": frozenset(
        {"shared", "sglang", "store", "endpoints", "sim", "server", "inputs", "dataset", "inspection", "engine", "cli"}
    ),
}


@dataclass(frozen=True)
class Arrow:
    source: str
    target: str
    lazy: bool  # only inside a function


@dataclass
class Graph:
    root: Path
    modules: list[str]
    arrows: list[Arrow] = field(default_factory=list)

    def edges(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {m: set() for m in self.modules}
        for a in self.arrows:
            out[a.source].add(a.target)
        return out


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


# Where the flat modules of trees before the reorganisation (614a7d8 and earlier) live now, so that `--root` on an
# old checkout measures it against today's table.
LEGACY_UNITS: dict[str, str] = {
    **dict.fromkeys(("client", "pool", "health", "autosize", "retry"), "endpoints"),
    **dict.fromkeys(("runner", "reader", "dispatcher", "gate", "metrics", "progress", "memory"), "engine"),
    **dict.fromkeys(("preflight", "verdicts", "launch"), "server"),
    "sglang_facts": "sglang",
    **dict.fromkeys(("export", "card", "input_files"), "dataset"),
    **dict.fromkeys(("merge", "manifest"), "store"),
}


def unit_of(module: str) -> str:
    """The layer unit a module belongs to: its subpackage, "shared", "cli" or "api"."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "__main__":
        return "api"
    if parts[1] in SHARED:
        return "shared"
    return LEGACY_UNITS.get(parts[1], parts[1])


def build_graph(root: Path, type_only: bool = False) -> Graph:
    """Every module under `root` (the pipeline/ folder) and every arrow between them (with `type_only`, the imports
    under `if TYPE_CHECKING:` as well)."""
    paths = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    modules = {module_name(root, p): p for p in paths}
    graph = Graph(root=root, modules=sorted(modules))
    seen: dict[tuple[str, str], bool] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), str(path))
        for target, lazy in _imports(tree, name, is_package, modules, type_only):
            if target != name:
                key = (name, target)
                seen[key] = seen.get(key, True) and lazy
    graph.arrows = [Arrow(s, t, lazy) for (s, t), lazy in sorted(seen.items())]
    return graph


def _imports(
    tree: ast.Module, name: str, is_package: bool, modules: dict[str, Path], type_only: bool = False
) -> Iterator[tuple[str, bool]]:
    here = name if is_package else name.rpartition(".")[0]
    for node, lazy in _walk(tree, lazy=False, type_only=type_only):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    yield _existing(alias.name, modules), lazy
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, here)
            if base.split(".")[0] != PACKAGE:
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield (sub if sub in modules else _existing(base, modules)), lazy


def _walk(node: ast.AST, lazy: bool, type_only: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test) and not type_only:
            continue
        inner = lazy or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        yield child, lazy
        yield from _walk(child, inner, type_only)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _absolute(node: ast.ImportFrom, here: str) -> str:
    if node.level == 0:
        return node.module or ""
    parts = here.split(".")
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _existing(name: str, modules: dict[str, Path]) -> str:
    """The longest prefix of a dotted name that is a module of the tree (`pipeline.x.y.attr` -> `pipeline.x.y`)."""
    while name not in modules and "." in name:
        name = name.rpartition(".")[0]
    return name


def circles(graph: Graph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted; the list sorted."""
    edges = graph.edges()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(edges) + 100))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def upward(graph: Graph) -> list[Arrow]:
    """Arrows the layer table does not allow: from a lower layer up, or across to a unit MAY_IMPORT does not list
    (a unit missing from the table is reported too: add it to LAYERS, MAY_IMPORT and docs/architecture.md)."""
    bad = []
    for a in graph.arrows:
        source, target = unit_of(a.source), unit_of(a.target)
        if source != target and target not in MAY_IMPORT.get(source, frozenset()):
            bad.append(a)
    return bad


def top_level_entries(root: Path) -> list[str]:
    """What `ls pipeline/` shows a newcomer: modules and subpackages, without dunder files and caches."""
    return sorted(
        p.name
        for p in root.iterdir()
        if not p.name.startswith(("__", ".")) and (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))
    )


def summary(graph: Graph) -> dict[str, Any]:
    pairs = Counter((unit_of(a.source), unit_of(a.target)) for a in graph.arrows)
    return {
        "modules": len(graph.modules),
        "top_level_entries": len(top_level_entries(graph.root)),
        "top_level": top_level_entries(graph.root),
        "arrows": len(graph.arrows),
        "arrows_in_functions": sum(a.lazy for a in graph.arrows),
        "unit_arrows": {f"{s} -> {t}": n for (s, t), n in sorted(pairs.items()) if s != t},
        "circles": circles(graph),
        "upward": [f"{a.source} -> {a.target}" + (" (in a function)" if a.lazy else "") for a in upward(graph)],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent, help="a checkout")
    parser.add_argument("--modules", action="store_true", help="print every module -> module arrow")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--type-only", action="store_true", help="count imports under `if TYPE_CHECKING:` too")
    args = parser.parse_args(argv)
    graph = build_graph(args.root / PACKAGE, type_only=args.type_only)
    data = summary(graph)
    if args.modules:
        data["module_arrows"] = [
            f"{a.source} -> {a.target}" + (" (in a function)" if a.lazy else "") for a in graph.arrows
        ]
    print(json.dumps(data, indent=2) if args.json else _text(data))
    return 1 if data["circles"] or data["upward"] else 0


def _text(data: dict[str, Any]) -> str:
    lines = [
        f"modules: {data['modules']}   top-level entries of {PACKAGE}/: {data['top_level_entries']}",
        f"import arrows (module -> module): {data['arrows']}, of which {data['arrows_in_functions']} in functions",
    ]
    lines += [f"  {arrow}" for arrow in data.get("module_arrows", [])]
    lines.append("between units (layer of the importer, unit -> unit: arrows):")
    lines += [f"  {LAYERS.get(pair.split(' ')[0], '?')}  {pair}: {n}" for pair, n in data["unit_arrows"].items()]
    lines.append(f"circles: {len(data['circles'])}")
    lines += ["  " + " <-> ".join(component) for component in data["circles"]]
    lines.append(f"upward imports: {len(data['upward'])}")
    lines += [f"  {line}" for line in data["upward"]]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
