"""Make ``import dgl`` work on a PyTorch newer than the DGL build, or say exactly why it cannot.

The newest DGL on PyPI (2.1.0) was built for torch 2.0-2.2. On a newer torch its import fails
in ``dgl.graphbolt``, which looks for ``libgraphbolt_pytorch_<torch version>.so`` beside
``libdgl.so`` and raises when there is none. gnnbridge uses none of graphbolt: sampling,
message passing and blocks live in ``libdgl.so``. DGL locates ``libdgl.so`` (and, from its
folder, graphbolt's library) through ``DGL_LIBRARY_PATH`` before its own folder, so we point
that variable at a small folder of ours holding:

    libdgl.so                                   -> the installed libdgl.so (symlink)
    graphbolt/libgraphbolt_pytorch_<ver>.so     -> the installed libdgl.so (symlink)

Loading libdgl.so a second time under the graphbolt name is a no-op for the dynamic loader (it
is already mapped), so graphbolt's import succeeds, and only graphbolt's own ops (which we
never call) stay unavailable. Nothing in site-packages is modified. When the running torch has
a real graphbolt build, none of this is done.

Also set before import: ``DGLBACKEND=pytorch`` (otherwise DGL may write a config file to the
home directory at import time).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
import warnings
from pathlib import Path

from gnnbridge.core.files import replace_link

_lock = threading.RLock()  # import_dgl holds it while `import dgl` runs the start-up hook, which takes it too
_state: dict[str, object] = {}


def torch_version() -> str:
    import torch

    return torch.__version__.split("+", maxsplit=1)[0]


def dgl_package_dir() -> Path | None:
    spec = importlib.util.find_spec("dgl")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def shim_dir(package: Path, version: str) -> Path:
    """Our library folder for this DGL install and torch version (user-writable, reused)."""
    base = os.environ.get("GNNBRIDGE_CACHE") or os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    root = Path(base) / "gnnbridge" / "dgl-libs"
    tag = f"torch-{version}-{hashlib.sha1(str(package.resolve()).encode()).hexdigest()[:10]}"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        root = Path(tempfile.gettempdir()) / f"gnnbridge-dgl-libs-{os.getuid()}"
    return root / tag


def prepare_library_path() -> str | None:
    """Set ``DGL_LIBRARY_PATH`` if graphbolt has no build for this torch; return a note or None."""
    package = dgl_package_dir()
    if package is None:
        return None
    version = torch_version()
    if (package / "graphbolt" / f"libgraphbolt_pytorch_{version}.so").exists():
        return None
    libdgl = package / "libdgl.so"
    if not libdgl.exists():
        return None
    target = shim_dir(package, version)
    (target / "graphbolt").mkdir(parents=True, exist_ok=True)
    replace_link(target / "libdgl.so", libdgl)  # atomic: concurrent ranks never see a half-made link
    replace_link(target / "graphbolt" / f"libgraphbolt_pytorch_{version}.so", libdgl)
    os.environ["DGL_LIBRARY_PATH"] = str(target)
    return f"graphbolt has no build for torch {version}; its ops are disabled (gnnbridge does not use them)"


def prepare_for_import() -> None:
    """What a plain ``import dgl`` needs first (the start-up hook ``_gnnbridge_dgl`` calls it)."""
    with _lock:
        os.environ.setdefault("DGLBACKEND", "pytorch")
        _state["note"] = prepare_library_path()


def import_dgl():
    """Import and return ``dgl``, repairing the library path first; raises ImportError with the reason."""
    with _lock:
        if "dgl" in sys.modules and "error" not in _state:
            return sys.modules["dgl"]
        if "error" in _state:
            raise ImportError(_state["error"])
        os.environ.setdefault("DGLBACKEND", "pytorch")
        try:
            _state["note"] = prepare_library_path()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import dgl
        except Exception as exc:  # every failure mode of a mismatched build, reported once
            _state["error"] = _explain(exc)
            raise ImportError(_state["error"]) from None
        return dgl


def _explain(exc: Exception) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, ModuleNotFoundError) and exc.name == "dgl":
        return "dgl is not installed; install it with pip install 'gnnbridge[dgl]'"
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").startswith("torchdata"):
        return f"dgl needs torchdata<0.10 (torchdata.datapipes is gone in 0.10): pip install 'torchdata<0.10' ({text})"
    if isinstance(exc, ModuleNotFoundError):
        return f"dgl needs the package '{exc.name}': pip install {exc.name} ({text})"
    return f"import dgl failed ({text})"


def compat_note() -> str | None:
    return _state.get("note")  # type: ignore[return-value]
