"""The API reference (docs/api.md) is generated from the docstrings of the functions behind
``gnnbridge.run``, ``evaluate``, ``predict``, ... : each must describe every parameter it takes
and what it returns, so a parameter added without a word on the site fails here."""

import importlib
import inspect

import pytest
from helpers import REPO

DOCUMENTED = [
    line.removeprefix(".. autofunction:: ").strip()
    for line in (REPO / "docs" / "api.md").read_text().splitlines()
    if line.startswith(".. autofunction:: gnnbridge.core.")
]


def test_the_reference_lists_the_function_behind_every_public_one():
    import gnnbridge

    public = {"run", "resolve_config", "evaluate", "predict", "load", "port", "export", "compare", "plot"}
    assert public <= set(gnnbridge.__all__)
    assert public <= {name.rsplit(".", 1)[1] for name in DOCUMENTED}


@pytest.mark.parametrize("name", DOCUMENTED)
def test_every_parameter_and_the_return_value_are_described(name):
    module, attr = name.rsplit(".", 1)
    fn = getattr(importlib.import_module(module), attr)
    doc = inspect.getdoc(fn) or ""
    missing = [p for p in inspect.signature(fn).parameters if f":param {p}:" not in doc]
    assert not missing, f"{name} does not describe {missing}"
    assert ":returns:" in doc, f"{name} does not say what it returns"
