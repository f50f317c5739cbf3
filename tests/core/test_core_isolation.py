"""core/ must import and run with both GNN libraries unavailable."""

import subprocess
import sys

BLOCKER = r"""
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split('.')[0] in ('torch_geometric', 'dgl'):
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
import pkgutil, importlib, gnnbridge.core as core
for mod in pkgutil.walk_packages(core.__path__, 'gnnbridge.core.'):
    importlib.import_module(mod.name)
import torch
from gnnbridge.core.sampling.neighbors import NeighborSampler
from gnnbridge.core.config import from_dict
from gnnbridge.core.plugins import backends
from_dict({})
for entry in backends.entries():
    print(entry.name, entry.value.availability() is None)
assert not any(m.split('.')[0] in ('torch_geometric', 'dgl') for m in sys.modules)
print('ok')
"""


def test_core_imports_and_reports_backends_with_libraries_blocked():
    proc = subprocess.run([sys.executable, "-c", BLOCKER], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split()
    assert lines[-1] == "ok"
    # Both backends still register, and both say they cannot run.
    assert "pyg" in lines and "dgl" in lines
    assert lines[lines.index("pyg") + 1] == "False" and lines[lines.index("dgl") + 1] == "False"
