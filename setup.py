"""Only what ``pyproject.toml`` cannot say.

* The built-in plugins' entry points (group ``gnnbridge``) come from the one list of them,
  ``BUILTIN_PLUGINS`` in ``gnnbridge/plugins/__init__.py``, which also loads them from a
  checkout that was never installed: read here with ``ast`` (importing gnnbridge would need
  torch at build time), so the two can never disagree.
* The wheel also carries ``gnnbridge-dgl.pth``, the start-up line that makes a plain
  ``import dgl`` work (see ``_gnnbridge_dgl.py``). A ``.pth`` file must sit in site-packages
  itself, outside any package, and setuptools installs only packages and modules there, so
  ``build_py`` copies it beside them (setuptools ships its own ``distutils-precedence.pth`` the
  same way).
"""

import ast
import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "gnnbridge-dgl.pth"


class BuildWithStartupLine(build_py):
    def run(self):
        super().run()
        self.copy_file(PTH, os.path.join(self.build_lib, PTH), preserve_mode=0)

    def get_outputs(self, include_bytecode=1):
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


def builtin_plugins() -> dict:
    tree = ast.parse((Path(__file__).parent / "gnnbridge" / "plugins" / "__init__.py").read_text())
    assigned = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "BUILTIN_PLUGINS" for t in node.targets)
    )
    return ast.literal_eval(assigned)


setup(
    cmdclass={"build_py": BuildWithStartupLine},
    # With the console script: setuptools takes entry points from setup.py or pyproject.toml, not both.
    entry_points={
        "console_scripts": ["gnnbridge = gnnbridge.cli:main"],
        "gnnbridge": [f"{name} = {module}" for name, module in builtin_plugins().items()],
    },
)
