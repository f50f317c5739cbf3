"""Registers every ``gnnbridge/experiments/*.yaml`` as a named experiment (name = file stem)."""

from __future__ import annotations

from importlib import resources

import yaml

from gnnbridge.core.contracts.hookspecs import hookimpl


@hookimpl
def register_experiments(register):
    folder = resources.files("gnnbridge") / "experiments"
    for item in sorted(folder.iterdir(), key=lambda p: p.name):
        if item.name.endswith(".yaml"):
            data = yaml.safe_load(item.read_text())
            register(item.name[: -len(".yaml")], data, data.get("description", ""))
