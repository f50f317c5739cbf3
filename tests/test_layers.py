"""The layering of the whole package, as rules over every import statement (lazy ones inside
functions included): the package flows one way (the CLI and the package's face, then the
conformance suite, then the backends and the built-in plugins side by side, then core), core
stays neutral and flows one way inside, backends stay apart, and no module comes back to itself
through a circle of imports.

The rules are the ones in ``gnnbridge/core/__init__.py`` and the README's Architecture section.
The checker reads source with ``ast``; it runs nothing, so it also sees imports on paths the
tests never execute.
"""

from __future__ import annotations

import ast
import functools
from collections import deque
from pathlib import Path

import gnnbridge

# Core's layers, bottom up. A module may import core modules of a lower rank and of its own
# layer; layers of equal rank stand side by side and may not import each other.
LAYERS = {
    "errors": 0,
    "compiled": 0,
    "environ": 0,
    "host": 0,
    "files": 1,
    "records": 1,
    "config": 1,
    "contracts": 2,
    "tasks": 2,
    "storage": 3,  # datasets on disk: formats, prepare, folders, link caches, partitions
    "plugins": 4,
    "runtime": 5,
    "sampling": 5,
    "models": 5,
    "inference": 6,  # a run's parts, evaluators, metrics, checkpoints: what scores a model
    "export": 6,  # the built-in models as plain torch programs, and the files they are written to
    "training": 7,  # the loop over those parts
    "app": 8,
}
MODULE_LAYERS = ("errors", "compiled", "environ", "host", "files")  # layers that are one module, not a package
FACADE = "gnnbridge.core.interfaces"  # re-exports for plugins: may import any layer, imported by none
NEVER_IN_CORE = (
    "torch_geometric",
    "dgl",
    "gnnbridge.backends",
    "gnnbridge.plugins",
    "gnnbridge.cli",
    "gnnbridge.testing",
)


# The package, bottom up. A module may import parts of a lower rank and its own part; parts of
# equal rank stand side by side and may not import each other. Within core the layers above
# decide; within the backends, backend_rule. "gnnbridge" is the package's own face: its
# ``__init__`` (the public API, ``gnnbridge.hookimpl`` for third-party plugins) and ``__main__``.
PACKAGE = {
    "gnnbridge.core": 0,
    "gnnbridge.backends": 1,
    "gnnbridge.plugins": 1,
    "gnnbridge.tables": 1,  # tables in: sources, schema, transforms; imports core only
    "gnnbridge.serving": 1,  # serve: the HTTP layer (FastAPI) over core's Served; imports core only
    "gnnbridge.testing": 2,  # the conformance suites a plugin runs against itself
    "gnnbridge.cli": 3,
    "gnnbridge": 4,
}
# Imports left out of the cycle check, each with the reason it may close a circle. None today:
# an entry names (importer, imported module) exactly, so a new circle is never let through.
CYCLE_EXCEPTIONS: dict[tuple[str, str], str] = {}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, name: str) -> list[tuple[int, str]]:
    """(line, imported module) for every import in the file; ``from a import b`` counts as
    ``a.b`` (b may be a module), relative imports resolved against ``name``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["gnnbridge", "core"] and parts[2] in LAYERS else None


def core_rule(importer: str, target: str) -> str | None:
    """Why ``importer`` (a core module) may not import ``target``, or None."""
    forbidden = next((p for p in NEVER_IN_CORE if under(target, p)), None)
    if forbidden:
        return f"core never imports {forbidden}"
    if not under(target, "gnnbridge"):
        return None
    if under(target, FACADE):
        return f"nothing in core imports the plugin facade {FACADE}"
    if not under(target, "gnnbridge.core") or target == "gnnbridge.core.__init__":
        return "core imports only gnnbridge.core (the package above it is higher)"
    if target != "gnnbridge.core" and layer(target) is None:
        return f"{target} is in no layer of core ({', '.join(LAYERS)})"
    mine, theirs = layer(importer), layer(target)
    if importer == FACADE or mine is None or theirs is None or mine == theirs:
        return None
    if LAYERS[theirs] >= LAYERS[mine]:
        where = "beside" if LAYERS[theirs] == LAYERS[mine] else "above"
        return f"layer {mine} imports {theirs}, which stands {where} it"
    return None


def part(module: str) -> str:
    """The part of the package ``module`` (or a name imported from it) belongs to."""
    return max((p for p in PACKAGE if under(module, p)), key=len)


def package_rule(importer: str, target: str) -> str | None:
    """Why ``importer`` may not import ``target`` by the package's order, or None."""
    if not under(target, "gnnbridge"):
        return None
    mine, theirs = part(importer), part(target)
    if mine == theirs or PACKAGE[theirs] < PACKAGE[mine]:
        return None
    where = "beside" if PACKAGE[theirs] == PACKAGE[mine] else "above"
    return f"{mine} imports {theirs}, which stands {where} it"


def backend_rule(importer: str, target: str, backends: set[str]) -> str | None:
    """``backends``: the backends' folders; a module beside them (``gnnbridge/backends/*.py``) is
    shared by all of them."""
    backend = importer.split(".")[2]
    if under(target, "gnnbridge.cli"):
        return "a backend never imports the CLI"
    if under(target, "gnnbridge.backends") and target.split(".")[2:3] not in ([backend], []):
        if target.split(".")[2] in backends:
            return f"backend {backend} imports another backend"
    return package_rule(importer, target)


def violations(root: Path) -> list[str]:
    """Every broken rule under ``root`` (the folder holding the ``gnnbridge`` package), then every
    import cycle."""
    out = []
    folder = root / "gnnbridge" / "backends"
    backends = (
        {p.name for p in folder.iterdir() if p.is_dir() and p.name != "__pycache__"} if folder.is_dir() else set()
    )
    for path in sorted((root / "gnnbridge").rglob("*.py")):
        name = module_name(path, root)
        if under(name, "gnnbridge.core") and layer(name) is None and name not in ("gnnbridge.core", FACADE):
            out.append(f"{path.relative_to(root)} is in no layer of core: move it into one ({', '.join(LAYERS)})")
        if under(name, "gnnbridge.core"):
            rule = core_rule
        elif under(name, "gnnbridge.backends") and name.count(".") >= 2:
            rule = functools.partial(backend_rule, backends=backends)
        else:
            rule = package_rule
        for line, target in imports(path, name):
            reason = rule(name, target)
            if reason:
                out.append(f"{path.relative_to(root)}:{line} imports {target}: {reason}")
    return out + cycles(root)


def import_graph(root: Path) -> dict[str, dict[str, str]]:
    """module -> {imported module: "file:line" of the first such import}, over the modules of the
    package (``from a import b`` is an import of ``a.b`` when that is a module, else of ``a``),
    lazy imports included, the exceptions in CYCLE_EXCEPTIONS left out."""
    paths = {module_name(p, root): p for p in sorted((root / "gnnbridge").rglob("*.py"))}
    graph: dict[str, dict[str, str]] = {}
    for name, path in paths.items():
        edges = graph.setdefault(name, {})
        for line, target in imports(path, name):
            module = target if target in paths else target.rpartition(".")[0]
            if module in paths and module != name and (name, module) not in CYCLE_EXCEPTIONS:
                edges.setdefault(module, f"{path.relative_to(root)}:{line}")
    return graph


def cycles(root: Path) -> list[str]:
    """One line per circle of imports: each group of modules that reach one another (a strongly
    connected component of the import graph), shown as the shortest circle through its first
    module, with where each of its imports is."""
    graph = import_graph(root)
    out = []
    for group in components(graph):
        if len(group) < 2:
            continue
        start = min(group)
        path = shortest_circle(graph, start, group)
        where = ", ".join(graph[a][b] for a, b in zip(path, path[1:]))
        out.append(
            f"import cycle: {' -> '.join(path)} ({where}); break it (a deliberate exception is named in "
            "CYCLE_EXCEPTIONS with its reason)"
        )
    return sorted(out)


def components(graph: dict[str, dict[str, str]]) -> list[set[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                found.append(group)
    return found


def shortest_circle(graph: dict[str, dict[str, str]], start: str, group: set[str]) -> list[str]:
    """The shortest path from ``start`` back to itself inside ``group`` (breadth first)."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph[node]):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if child in group and child not in came_from:
                came_from[child] = node
                queue.append(child)
    raise AssertionError(f"{start} is in a cycle it cannot reach")


def test_the_package_keeps_its_layers():
    root = Path(gnnbridge.__file__).parent.parent
    assert violations(root) == []


def test_core_holds_its_layers_and_nothing_else_each_documented():
    core = Path(gnnbridge.__file__).parent / "core"
    entries = {p.stem for p in core.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()}
    assert entries == {*LAYERS, "interfaces", "__init__"}
    for name in LAYERS:
        init = core / name / "__init__.py" if name not in MODULE_LAYERS else core / f"{name}.py"
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc, f"{init} says nothing of what the layer is for"
        assert name in MODULE_LAYERS or "May import" in doc, f"{init} does not say what the layer may import"


BROKEN = {
    # a lower layer reaching up, lazily inside a function
    "gnnbridge/core/records/data.py": "def f():\n    from gnnbridge.core.training.trainer import Trainer\n",
    # side by side: runtime and sampling stand on the same floor
    "gnnbridge/core/runtime/rank.py": "from ..sampling import seeds\n",
    # a library, the built-in plugins and the package above core
    "gnnbridge/core/contracts/config.py": (
        "import torch_geometric\nfrom gnnbridge.plugins import BUILTIN\nimport gnnbridge\n"
    ),
    # core reaching for the facade meant for plugins, and for a name of core's package itself
    "gnnbridge/core/app/train.py": "from gnnbridge.core.interfaces import Backend\nfrom gnnbridge.core import utils\n",
    # a module outside every layer
    "gnnbridge/core/helpers.py": "import os\n",
    # one backend importing the other, and the CLI
    "gnnbridge/backends/pyg/models.py": "from gnnbridge.backends.dgl import compat\nimport gnnbridge.cli\n",
    # allowed: downward, own layer, facade importing anything, a backend importing core
    "gnnbridge/core/training/trainer.py": (
        "from gnnbridge.core.runtime.context import DistContext\nfrom . import state\n"
    ),
    "gnnbridge/core/interfaces.py": "from gnnbridge.core.sampling.adapters import CoreSampler\n",
    "gnnbridge/backends/dgl/models.py": (
        "from gnnbridge.core.models.gin import GIN\nfrom gnnbridge.backends.dgl.compat import x\n"
    ),
    # the package's order: a built-in plugin reaching for the package's face and the CLI, a
    # backend for the built-in plugins, a plugin for a backend, the conformance suite for the CLI
    "gnnbridge/plugins/experiments.py": "from gnnbridge import hookimpl\nimport gnnbridge.cli\n",
    "gnnbridge/backends/pyg/plugin.py": (
        "from gnnbridge.plugins.datasets import options\nfrom gnnbridge.backends.catalogue import NEUTRAL\n"
    ),
    "gnnbridge/plugins/samplers.py": "from gnnbridge.backends.pyg import sampler\n",
    "gnnbridge/testing/workers.py": "import gnnbridge.cli\nfrom gnnbridge.plugins.datasets import synthetic_graph\n",
    # allowed: the CLI and the package's face import everything below them
    "gnnbridge/cli.py": "from gnnbridge.plugins.folder_datasets import prepare\nfrom gnnbridge.core.app import train\n",
    "gnnbridge/__init__.py": "from gnnbridge.plugins import BUILTIN_PLUGINS\nfrom gnnbridge.core import files\n",
    "gnnbridge/__main__.py": "from gnnbridge.cli import main\n",
    # circles: two plugins importing each other (one lazily, inside a function), and three modules
    # of one core layer (each import allowed by the layers, the circle not)
    "gnnbridge/plugins/datasets.py": "from gnnbridge.plugins import hetero_datasets\n",
    "gnnbridge/plugins/hetero_datasets.py": "def f():\n    from gnnbridge.plugins.datasets import options\n",
    "gnnbridge/core/training/state.py": "from gnnbridge.core.training.checkpointing import save\n",
    "gnnbridge/core/training/checkpointing.py": "import gnnbridge.core.training.trainer\n",
}


def test_the_checker_names_each_broken_rule(tmp_path):
    for rel, code in BROKEN.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code)
    found = violations(tmp_path)
    CYCLE = "; break it (a deliberate exception is named in CYCLE_EXCEPTIONS with its reason)"
    expected = [
        "gnnbridge/backends/pyg/models.py:1 imports gnnbridge.backends.dgl.compat: backend pyg imports another backend",
        "gnnbridge/backends/pyg/models.py:2 imports gnnbridge.cli: a backend never imports the CLI",
        "gnnbridge/backends/pyg/plugin.py:1 imports gnnbridge.plugins.datasets.options: gnnbridge.backends imports "
        "gnnbridge.plugins, which stands beside it",
        "gnnbridge/core/app/train.py:1 imports gnnbridge.core.interfaces.Backend: nothing in core imports the plugin "
        "facade gnnbridge.core.interfaces",
        "gnnbridge/core/app/train.py:2 imports gnnbridge.core.utils: gnnbridge.core.utils is in no layer of core "
        "(errors, compiled, environ, host, files, records, config, contracts, tasks, storage, plugins, runtime, "
        "sampling, models, inference, export, training, app)",
        "gnnbridge/core/contracts/config.py:1 imports torch_geometric: core never imports torch_geometric",
        "gnnbridge/core/contracts/config.py:2 imports gnnbridge.plugins.BUILTIN: core never imports gnnbridge.plugins",
        "gnnbridge/core/contracts/config.py:3 imports gnnbridge: core imports only gnnbridge.core (the package above "
        "it is higher)",
        "gnnbridge/core/helpers.py is in no layer of core: move it into one (errors, compiled, environ, host, files, "
        "records, config, contracts, tasks, storage, plugins, runtime, sampling, models, inference, export, "
        "training, app)",
        "gnnbridge/core/records/data.py:2 imports gnnbridge.core.training.trainer.Trainer: layer records imports "
        "training, which stands above it",
        "gnnbridge/core/runtime/rank.py:1 imports gnnbridge.core.sampling.seeds: layer runtime imports sampling, which "
        "stands beside it",
        "gnnbridge/plugins/experiments.py:1 imports gnnbridge.hookimpl: gnnbridge.plugins imports gnnbridge, which "
        "stands above it",
        "gnnbridge/plugins/experiments.py:2 imports gnnbridge.cli: gnnbridge.plugins imports gnnbridge.cli, which "
        "stands above it",
        "gnnbridge/plugins/samplers.py:1 imports gnnbridge.backends.pyg.sampler: gnnbridge.plugins imports "
        "gnnbridge.backends, which stands beside it",
        "gnnbridge/testing/workers.py:1 imports gnnbridge.cli: gnnbridge.testing imports gnnbridge.cli, which stands "
        "above it",
        "import cycle: gnnbridge.core.training.checkpointing -> gnnbridge.core.training.trainer -> "
        "gnnbridge.core.training.state -> gnnbridge.core.training.checkpointing "
        "(gnnbridge/core/training/checkpointing.py:1, "
        f"gnnbridge/core/training/trainer.py:2, gnnbridge/core/training/state.py:1){CYCLE}",
        "import cycle: gnnbridge.plugins.datasets -> gnnbridge.plugins.hetero_datasets -> gnnbridge.plugins.datasets "
        f"(gnnbridge/plugins/datasets.py:1, gnnbridge/plugins/hetero_datasets.py:2){CYCLE}",
    ]
    assert found == expected


def test_a_named_exception_lifts_only_its_own_circle(tmp_path, monkeypatch):
    for rel, code in BROKEN.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code)
    key = ("gnnbridge.plugins.hetero_datasets", "gnnbridge.plugins.datasets")
    monkeypatch.setitem(CYCLE_EXCEPTIONS, key, "a lazy import the test names")
    found = [line for line in violations(tmp_path) if line.startswith("import cycle")]
    assert [line.split(" (")[0] for line in found] == [
        "import cycle: gnnbridge.core.training.checkpointing -> gnnbridge.core.training.trainer -> "
        "gnnbridge.core.training.state -> gnnbridge.core.training.checkpointing"
    ]


def test_the_package_has_no_circle_of_imports():
    """Said apart from the rules above so a failure reads as what it is."""
    root = Path(gnnbridge.__file__).parent.parent
    assert cycles(root) == []
