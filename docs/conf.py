"""Sphinx configuration of gnnbridge's documentation site (``make docs``).

Pages are Markdown (myst-parser), the theme is furo, the CLI reference comes from the click group
(sphinx-click), the Python API from docstrings (autodoc), and the configuration reference from the
schema's help (``docs/_ext/config_reference.py``). ``make docs`` builds with warnings as errors.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

project = "gnnbridge"
author = "the gnnbridge authors"
copyright = "the gnnbridge authors, Apache-2.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx_click",
    "config_reference",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Headings up to level 4 get anchors, so a page links into another as [text](page.md#heading).
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]

# The API pages document what the docstrings say, in source order.
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True}

html_theme = "furo"
html_title = "gnnbridge"

# Options are written --set, --nproc: never turn their two hyphens into a dash.
smartquotes = False
