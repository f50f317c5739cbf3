"""Source files a model's construction generates in the temp folder, removed once it is built.

PyG's ``MessagePassing`` renders its ``propagate`` (and ``edge_updater``) from a jinja template
the first time a layer class is built in a process, writes it to ``$TMPDIR`` as
``<module name>_<random>.py`` (``tempfile.NamedTemporaryFile(delete=False)``), imports it, and
never removes it: every process that built a PyG model (the launcher's preflight, each rank,
``evaluate``, ``predict``) left one such file per layer class, and ``$TMPDIR`` filled up run after
run. PyG offers no switch for it (``tmp_dirname`` is accepted and unused).

The module is imported, and its code compiled, before the builder returns, so the file is not
needed afterwards except to read its source (``inspect.getsource``, ``torch.jit.script``, a
traceback's lines). :func:`removing_generated_modules` wraps a construction and then deletes
exactly the files that match all of: a module first imported during the construction, whose
``__file__`` lies directly in ``tempfile.gettempdir()``, named after the module itself plus a
suffix (the generated-file pattern), and the bytecode Python cached for them (with bytecode
writing on, Python's default, the import also wrote ``$TMPDIR/__pycache__/<name>.cpython-*.pyc``;
that folder goes too once empty, if the construction made it or wrote into it: the ranks of a job
build at once, and the rank that made it may still find another's bytecode there). Their text stays in
:mod:`linecache`, so source lookups keep working in the process. Nothing process-wide changes
(``tempfile.tempdir`` is left alone: pointing it elsewhere would move every other library's temp
files and caches too), and a process killed while it builds a model is the only one that can
leave such a file behind.
"""

from __future__ import annotations

import contextlib
import importlib.util
import linecache
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def removing_generated_modules() -> Iterator[None]:
    """Run the body (a model's construction), then remove the module files it generated in the
    temp folder (see the module's docstring), also when the body raises."""
    before = set(sys.modules)
    cache_folder = Path(importlib.util.cache_from_source(os.path.join(tempfile.gettempdir(), "x.py"))).parent
    cache_existed = cache_folder.exists()
    try:
        yield
    finally:
        removed = [
            _remove_if_generated(n, getattr(sys.modules.get(n), "__file__", None)) for n in set(sys.modules) - before
        ]
        # Only if empty: another process's bytecode stays. Also when it existed before: the ranks of
        # one job build at once, and the one that made the folder may find another's bytecode still
        # there; whichever removes the last file takes the folder.
        if not cache_existed or any(removed):
            with contextlib.suppress(OSError):
                cache_folder.rmdir()


def _remove_if_generated(name: str, path: str | None) -> bool:
    """Whether ``name`` was a generated module (its file and bytecode then removed)."""
    if not path:
        return False
    file = Path(path)
    if file.suffix != ".py" or file.parent != Path(tempfile.gettempdir()) or not file.name.startswith(f"{name}_"):
        return False
    with contextlib.suppress(OSError):
        text = file.read_text()
        # A loader-style entry (no mtime): linecache.checkcache keeps it though the file is gone.
        linecache.cache[path] = (len(text), None, text.splitlines(True), path)
        os.unlink(file)
    with contextlib.suppress(OSError, NotImplementedError):
        os.unlink(importlib.util.cache_from_source(path))
    return True
