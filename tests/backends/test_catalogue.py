"""The neutral catalogue as a third backend registers it: all of it, or the part it builds."""

import pytest

from gnnbridge.backends.catalogue import NEUTRAL, register_neutral


def registered(builders, layers=None) -> dict:
    seen = {}

    def register(name, build, tasks, heterogeneous, description):
        seen[name] = (build, tasks, heterogeneous, description)

    register_neutral(register, "mine", builders, *([layers] if layers is not None else []))
    return seen


def test_a_backend_registers_the_architectures_it_builds_and_no_other():
    build = object()
    seen = registered({"sage": build, "gin": build})
    assert sorted(seen) == ["gin", "sage"]
    sage = next(arch for arch in NEUTRAL if arch.name == "sage")
    assert seen["sage"][:3] == ({"mine": build}, list(sage.tasks), True)
    assert "relation-wise wrapper" in seen["sage"][3]  # no layer names given: generic words
    assert "MyHeteroConv" in registered({"sage": build}, {"hetero": "MyHeteroConv"})["sage"][3]


def test_a_builder_for_an_architecture_the_catalogue_lacks_is_refused_naming_it():
    with pytest.raises(ValueError, match="'mine' has builders for graphormer, which the neutral catalogue"):
        registered({"sage": object(), "graphormer": object()})
