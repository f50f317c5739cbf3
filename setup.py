"""Only what ``pyproject.toml`` cannot say: the wheel also carries ``gnnbridge-dgl.pth``, the
start-up line that makes a plain ``import dgl`` work (see ``_gnnbridge_dgl.py``). A ``.pth``
file must sit in site-packages itself, outside any package, and setuptools installs only
packages and modules there, so ``build_py`` copies it beside them (setuptools ships its own
``distutils-precedence.pth`` the same way)."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "gnnbridge-dgl.pth"


class BuildWithStartupLine(build_py):
    def run(self):
        super().run()
        self.copy_file(PTH, os.path.join(self.build_lib, PTH), preserve_mode=0)

    def get_outputs(self, include_bytecode=1):
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": BuildWithStartupLine})
