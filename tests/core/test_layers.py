"""The layering of the package, as rules over every import statement (lazy ones inside functions
included): core stays neutral and flows one way, backends stay apart.

The rules are the ones in ``gnnbridge/core/__init__.py`` and the README's Architecture section.
The checker reads source with ``ast``; it runs nothing, so it also sees imports on paths the
tests never execute.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gnnbridge

# Core's layers, bottom up. A module may import core modules of a lower rank and of its own
# layer; layers of equal rank stand side by side and may not import each other.
LAYERS = {
    "errors": 0,
    "compiled": 0,
    "files": 1,
    "records": 1,
    "contracts": 2,
    "runtime": 3,
    "sampling": 3,
    "models": 3,
    "training": 4,
    "inference": 5,  # scores a trained model with training's parts and evaluators, without its loop
    "app": 6,
}
MODULE_LAYERS = ("errors", "compiled", "files")  # layers that are one module, not a package
FACADE = "gnnbridge.core.interfaces"  # re-exports for plugins: may import any layer, imported by none
NEVER_IN_CORE = (
    "torch_geometric",
    "dgl",
    "gnnbridge.backends",
    "gnnbridge.plugins",
    "gnnbridge.cli",
    "gnnbridge.testing",
)


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


def backend_rule(importer: str, target: str) -> str | None:
    backend = importer.split(".")[2]
    if under(target, "gnnbridge.cli"):
        return "a backend never imports the CLI"
    if under(target, "gnnbridge.backends") and target.split(".")[2:3] not in ([backend], []):
        return f"backend {backend} imports another backend"
    return None


def violations(root: Path) -> list[str]:
    """Every broken rule under ``root`` (the folder holding the ``gnnbridge`` package)."""
    out = []
    for path in sorted((root / "gnnbridge").rglob("*.py")):
        name = module_name(path, root)
        if under(name, "gnnbridge.core") and layer(name) is None and name not in ("gnnbridge.core", FACADE):
            out.append(f"{path.relative_to(root)} is in no layer of core: move it into one ({', '.join(LAYERS)})")
        if under(name, "gnnbridge.core"):
            rule = core_rule
        elif under(name, "gnnbridge.backends") and name.count(".") >= 2:
            rule = backend_rule
        else:
            continue
        for line, target in imports(path, name):
            reason = rule(name, target)
            if reason:
                out.append(f"{path.relative_to(root)}:{line} imports {target}: {reason}")
    return out


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
}


def test_the_checker_names_each_broken_rule(tmp_path):
    for rel, code in BROKEN.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code)
    found = violations(tmp_path)
    expected = [
        "gnnbridge/backends/pyg/models.py:1 imports gnnbridge.backends.dgl.compat: backend pyg imports another backend",
        "gnnbridge/backends/pyg/models.py:2 imports gnnbridge.cli: a backend never imports the CLI",
        "gnnbridge/core/app/train.py:1 imports gnnbridge.core.interfaces.Backend: nothing in core imports the plugin "
        "facade gnnbridge.core.interfaces",
        "gnnbridge/core/app/train.py:2 imports gnnbridge.core.utils: gnnbridge.core.utils is in no layer of core "
        "(errors, compiled, files, records, contracts, runtime, sampling, models, training, inference, app)",
        "gnnbridge/core/contracts/config.py:1 imports torch_geometric: core never imports torch_geometric",
        "gnnbridge/core/contracts/config.py:2 imports gnnbridge.plugins.BUILTIN: core never imports gnnbridge.plugins",
        "gnnbridge/core/contracts/config.py:3 imports gnnbridge: core imports only gnnbridge.core (the package above "
        "it is higher)",
        "gnnbridge/core/helpers.py is in no layer of core: move it into one (errors, compiled, files, records, "
        "contracts, runtime, sampling, models, training, inference, app)",
        "gnnbridge/core/records/data.py:2 imports gnnbridge.core.training.trainer.Trainer: layer records imports "
        "training, which stands above it",
        "gnnbridge/core/runtime/rank.py:1 imports gnnbridge.core.sampling.seeds: layer runtime imports sampling, which "
        "stands beside it",
    ]
    assert found == expected
