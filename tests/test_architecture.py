"""The package's shape: no import circle, no import against the layer table of docs/architecture.md, a pinned public
API, and a top level a newcomer can read. The graph comes from scripts/import_graph.py (`ast`, nothing imported)."""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pipeline

ROOT = Path(__file__).resolve().parent.parent


def _load_script(name: str = "import_graph") -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


graph_tool = _load_script()
GRAPH = graph_tool.build_graph(ROOT / "pipeline")


def test_the_graph_sees_the_whole_package() -> None:
    assert len(GRAPH.modules) > 50
    assert "pipeline.engine.runner" in GRAPH.modules
    assert any(a.source == "pipeline.engine.runner" and a.target == "pipeline.store" for a in GRAPH.arrows)


def test_no_import_circle() -> None:
    assert graph_tool.circles(GRAPH) == []


def test_no_import_against_the_layer_table() -> None:
    bad = [f"{a.source} -> {a.target}" for a in graph_tool.upward(GRAPH)]
    assert bad == [], "imports that run up a layer or across to a unit the table does not allow"


def test_every_unit_is_in_the_table() -> None:
    units = {graph_tool.unit_of(m) for m in GRAPH.modules}
    assert units <= set(graph_tool.LAYERS), "a new subpackage needs a row in docs/architecture.md and the script"


def test_the_table_points_one_way() -> None:
    layers, may = graph_tool.LAYERS, graph_tool.MAY_IMPORT
    assert set(may) == set(layers)
    upward = sorted(f"{s} -> {t}" for s, targets in may.items() for t in targets if layers[t] > layers[s])
    assert upward == []


def test_the_docs_table_is_the_scripts_table() -> None:
    rows = re.findall(
        r"^\| `(\w+)` \| (\d+) \| .* \| ([\w, ]+) \|$", (ROOT / "docs" / "architecture.md").read_text(), re.M
    )
    documented = {unit: (int(layer), frozenset(t.strip() for t in may.split(","))) for unit, layer, may in rows}
    expected = {unit: (graph_tool.LAYERS[unit], graph_tool.MAY_IMPORT[unit]) for unit in graph_tool.LAYERS}
    assert documented == expected


def test_the_top_level_names_the_flow() -> None:
    entries = graph_tool.top_level_entries(ROOT / "pipeline")
    # 14, then loops.py: the one loop detector every layer judges text with; then sglang/: SGLang's releases, the
    # facts server/, endpoints/ and sim/ share (it was spread over the three); then inputs/: the reader, input files
    # and a row's id, which were split over engine/ and dataset/
    assert len(entries) <= 17, entries


def test_the_script_runs_and_reports_a_clean_tree() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "import_graph.py")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "circles: 0" in result.stdout and "upward imports: 0" in result.stdout


PUBLIC_API = [
    "Config",
    "ConfigDriftError",
    "ConfigError",
    "EndpointError",
    "InputError",
    "Interrupted",
    "LockedError",
    "OutputError",
    "PreflightError",
    "RegenError",
    "RunOptions",
    "RunSummary",
    "__version__",
    "inspect_run",
    "load_config",
    "preflight",
    "run",
    "run_status",
    "validate_run",
]


def test_public_api_is_pinned() -> None:
    assert sorted(pipeline.__all__) == PUBLIC_API


def test_every_public_name_resolves() -> None:
    code = "import pipeline\nfor name in pipeline.__all__:\n    getattr(pipeline, name)\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_pipeline_run_stays_the_function_after_the_engine_is_imported() -> None:
    code = "import pipeline.engine.runner, pipeline\nassert callable(pipeline.run), pipeline.run\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


_IMPORTS_AFTER = """
import contextlib, io, sys
from pipeline.cli import main
loaded = {"import": sorted(m for m in ("matplotlib", "datasets") if m in sys.modules)}
for argv in (["status", sys.argv[1]], ["inspect", sys.argv[1]]):
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(argv) == 0, argv
    loaded[argv[0]] = sorted(m for m in ("matplotlib", "datasets") if m in sys.modules)
print(loaded)
"""


def test_status_and_inspect_do_not_load_matplotlib_or_datasets(tmp_path: Path) -> None:
    """matplotlib (~0.7 s of `regen status` before) is for `inspect --html` only; `datasets` is for tests only."""
    from tests.helpers.inspection_runs import build_run

    run_dir = build_run(tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", _IMPORTS_AFTER, str(run_dir)], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "{'import': [], 'status': [], 'inspect': []}"


_RUN_DIR_LITERAL = re.compile(
    r'/ ["\'](shards|rejects|journal|locks|metrics|heartbeats|damaged|run\.json)["\']'
    r'|["\'](shards|rejects|journal)/["\']'
    r"|'(shards|rejects)' if .* else '(shards|rejects)'"
)


def test_run_directory_names_are_written_only_in_store_layout() -> None:
    """Every wing names RUN_DIR's files and folders through pipeline/store/layout.py (issue 26, item 6): a path built
    from a literal (`run_dir / "shards"`) elsewhere is one more place to edit when the layout changes."""
    found = []
    for path in sorted((ROOT / "pipeline").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ("pipeline/store/layout.py",) or rel.startswith("pipeline/sim/"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if _RUN_DIR_LITERAL.search(line):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert found == []


def test_no_private_name_is_imported_across_modules() -> None:
    """What two modules share has a public name, or lives in the module that owns it (issue 39): `from X import
    _name` from another module is a helper hiding behind an underscore."""
    assert _load_script("tree_measures").private_cross_imports(ROOT) == []


def test_server_reads_release_facts_not_the_simulator() -> None:
    """Production code in server/ asks pipeline.sglang what a release does; it does not import the simulator, not
    even to serve an endpoint a config names `url = "sim"` (issue 39: the composition root hands preflight the
    embedded simulator)."""
    to_sim = sorted(
        f"{a.source} -> {a.target}"
        for a in GRAPH.arrows
        if a.source.startswith("pipeline.server") and a.target.startswith("pipeline.sim")
    )
    assert to_sim == []


# Who may import pipeline.sim besides the simulator itself: the composition roots, which hand the runner, preflight
# and `regen init` the embedded simulator an endpoint `url = "sim"` asks for. `pipeline.cli` is `regen`;
# `pipeline` (__init__.py) is the public API, whose `run` and `preflight` are `regen run` and `regen preflight` for a
# library user (regen/api.py goes through them), so it composes them as the CLI does.
COMPOSITION_ROOTS = ("pipeline", "pipeline.cli")


def test_only_the_composition_roots_import_the_simulator() -> None:
    """Production code does not import the simulator package (issue 39, item 2): not the engine, not preflight,
    not even inside a function or for types only."""
    typed = graph_tool.build_graph(ROOT / "pipeline", type_only=True)
    to_sim = sorted(
        f"{a.source} -> {a.target}"
        for a in [*GRAPH.arrows, *typed.arrows]
        if a.target.startswith("pipeline.sim")
        and not a.source.startswith("pipeline.sim")
        and a.source not in COMPOSITION_ROOTS
    )
    assert to_sim == []
    roots = {a.source for a in GRAPH.arrows if a.target.startswith("pipeline.sim") and a.target != a.source}
    assert roots - {m for m in roots if m.startswith("pipeline.sim")} == set(COMPOSITION_ROOTS)


def test_release_facts_are_a_leaf() -> None:
    from_facts = [
        a for a in GRAPH.arrows if a.source.startswith("pipeline.sglang") and graph_tool.unit_of(a.target) != "sglang"
    ]
    assert from_facts == []
    readers = {graph_tool.unit_of(a.source) for a in GRAPH.arrows if a.target.startswith("pipeline.sglang")}
    assert {"server", "endpoints", "sim"} <= readers


def test_no_upward_import_even_for_types() -> None:
    typed = graph_tool.build_graph(ROOT / "pipeline", type_only=True)
    assert [f"{a.source} -> {a.target}" for a in graph_tool.upward(typed)] == []


def _documented_modules() -> dict[str, set[str]]:
    """{unit: the modules its row of docs/architecture.md names}: `x.py` at the top, bare names inside a package."""
    rows = re.findall(r"^\| `(\w+)` \| \d+ \| ([^|]*) \|", (ROOT / "docs" / "architecture.md").read_text(), re.M)
    return {unit: {n for n in re.findall(r"`([\w./]+)`", modules) if not n.endswith("/")} for unit, modules in rows}


def _modules_on_disk() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {unit: set() for unit in graph_tool.LAYERS}
    for module in GRAPH.modules:
        unit, parts = graph_tool.unit_of(module), module.split(".")
        if unit == "api":
            out[unit].add("__init__.py" if len(parts) == 1 else "__main__.py")
        elif len(parts) == 2 and (ROOT / "pipeline" / f"{parts[1]}.py").exists():
            out[unit].add(f"{parts[1]}.py")
        elif len(parts) > 2 and not parts[-1].startswith("__"):
            out[unit].add(".".join(parts[2:]))
    return out


def test_each_row_of_the_map_lists_its_modules() -> None:
    """The map is true to the tree: a module added, moved or removed shows up as a row to change."""
    documented, on_disk = _documented_modules(), _modules_on_disk()
    assert set(documented) == set(on_disk)
    wrong = {
        unit: {"missing from the page": sorted(on_disk[unit] - names), "not on disk": sorted(names - on_disk[unit])}
        for unit, names in documented.items()
        if names != on_disk[unit]
    }
    assert wrong == {}


def test_every_package_says_what_it_owns() -> None:
    """A package's docstring is its row of the map in prose: more than its name, and it names what it owns."""
    for init in sorted((ROOT / "pipeline").glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert len(doc.split()) >= 12, f"{init.parent.name}/__init__.py: {doc!r}"
