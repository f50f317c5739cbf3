"""The site's Python scripts run as written: a whole script (one that imports gnnbridge) starting
ranks from Python (``nproc`` above 1) puts that call under the main guard, since every rank
imports the script again and gnnbridge refuses a call outside it. Fragments (a line or two
showing a call) are not scripts and are left alone."""

from __future__ import annotations

import re

import pytest
from helpers import REPO

BLOCK = re.compile(r"```python\n(.*?)```", re.S)
SEVERAL_RANKS = re.compile(r"\bnproc\s*=\s*(?:[2-9]|\d\d)")


def scripts() -> list:
    found = []
    for page in sorted((REPO / "docs").rglob("*.md")):
        text = page.read_text()
        for block in BLOCK.finditer(text):
            code = block.group(1)
            if re.search(r"^import gnnbridge\b", code, re.M) and SEVERAL_RANKS.search(code):
                line = text[: block.start()].count("\n") + 1
                found.append(pytest.param(code, id=f"{page.relative_to(REPO)}:{line}"))
    return found


def test_the_site_has_such_scripts():
    assert len(scripts()) >= 3  # (the check below would pass on none)


@pytest.mark.parametrize("code", scripts())
def test_a_script_that_starts_ranks_has_the_main_guard(code):
    assert 'if __name__ == "__main__":' in code
