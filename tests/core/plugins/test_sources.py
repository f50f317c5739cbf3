"""The one registry of dataset sources: the order sources are asked in, a plugin's source added
with one registration, one line for a text no source takes, and the kinds listed."""

from __future__ import annotations

import numpy as np
import pytest

from gnnbridge import hookimpl
from gnnbridge.core.app.prepare import prepare
from gnnbridge.core.app.resolve import resolve_config
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.interfaces import DatasetSource
from gnnbridge.core.plugins import dataset_sources, source_for
from gnnbridge.testing import registered_plugin


class EdgeListSource:
    """A third-party source: ``FILE.edges`` (one ``src dst`` pair a line), prepared as an
    ``.npz`` beside it and read as one; ``FILE.edges`` also wins over the built-in catch-alls."""

    @hookimpl
    def register_dataset_sources(self, register):
        register(DatasetSource("edges", lambda t: t.endswith(".edges"), "an edge list (.edges)", None, self.prepare))

    @staticmethod
    def prepare(text, out, dtype, progress):
        pairs = np.loadtxt(text, dtype=np.int64).T
        n = int(pairs.max()) + 1
        np.savez(f"{out}.npz", edge_index=pairs, x=np.ones((n, 2), np.float32), y=np.arange(n) % 2)
        return {"out": f"{out}.npz", "nodes": n}


def test_the_built_in_kinds_are_listed_in_the_order_they_are_asked():
    kinds = dataset_sources.kinds()
    names = [k["name"] for k in kinds]
    assert names[-3:] == ["folder", "npz", "name"]  # the catch-alls, last
    assert {"tables-folder", "tables-sqlite", "tables-duckdb", "tables-postgresql"} <= set(names[:-3])
    assert {k["plugin"] for k in kinds if k["name"].startswith("tables-")} == {"tables"}
    assert not any(k["reads"] for k in kinds if k["name"].startswith("tables-"))  # prepared first


def test_each_text_finds_its_source(tmp_path):
    (tmp_path / "graph").mkdir()
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "customers.csv").write_text("id\n1\n")
    (tmp_path / "shop.sqlite").write_bytes(b"")
    assert source_for(str(tmp_path / "shop")).name == "tables-folder"
    assert source_for(str(tmp_path / "shop.sqlite")).name == "tables-sqlite"
    assert source_for(str(tmp_path / "graph")).name == "folder"
    assert source_for("graph.npz").name == "npz"
    assert source_for("karate").name == "name"
    # a run reads a table folder as a folder (refused there until prepared), as before
    assert dataset_sources.section(str(tmp_path / "shop")) == {"name": "folder", "path": str(tmp_path / "shop")}


def test_a_plugin_adds_a_source_with_one_registration_asked_before_the_catch_alls(tmp_path):
    edges = tmp_path / "ring.edges"
    edges.write_text("0 1\n1 2\n2 0\n")
    assert source_for(str(edges)).name == "npz"  # any path, before the plugin
    with registered_plugin(EdgeListSource(), "edges-test"):
        assert source_for(str(edges)).name == "edges"
        assert [k["name"] for k in dataset_sources.kinds()][-4:] == ["edges", "folder", "npz", "name"]
        done = prepare(str(edges), str(tmp_path / "ring"))
        assert done["nodes"] == 3 and (tmp_path / "ring.npz").is_file()
        with pytest.raises(ConfigError, match=r"--label: .* is an edge list \(.edges\), which takes no --label"):
            prepare(str(edges), str(tmp_path / "ring"), label="a.b")
        # a source a run does not read: --dataset falls to the readable ones
        assert dataset_sources.section(str(edges))["name"] == "npz"
    assert "edges" not in [k["name"] for k in dataset_sources.kinds()]


def test_a_text_no_source_takes_is_one_line_listing_the_kinds():
    from gnnbridge.core.plugins.sources import SourceRegistry

    only = SourceRegistry("dataset source", "register_dataset_sources", "", lambda v: isinstance(v, DatasetSource))
    only._entries = {}
    with pytest.raises(ConfigError, match="no dataset source is installed"):
        only.source_for("anything")
    with registered_plugin(EdgeListSource(), "edges-test"):
        narrow = SourceRegistry("dataset source", "register_dataset_sources", "")
        narrow._entries = {"edges": dataset_sources._collect()["edges"]}
        with pytest.raises(ConfigError) as err:
            narrow.source_for("graph.csv")
    assert str(err.value) == "No dataset source takes 'graph.csv'; give one of: an edge list (.edges)."


def test_dataset_resolves_through_the_registry(tmp_path):
    (tmp_path / "g").mkdir()
    assert resolve_config(dataset=str(tmp_path / "g")).dataset.name == "folder"
    assert resolve_config(dataset="karate").dataset.name == "karate"
    assert resolve_config(dataset=str(tmp_path / "x.npz")).dataset.name == "npz"


def test_a_registration_that_is_no_source_is_refused():
    class Wrong:
        @hookimpl
        def register_dataset_sources(self, register):
            register("bad", object(), "not a source")

    from gnnbridge.core.plugins import PluginError

    with registered_plugin(Wrong(), "wrong-source"):
        with pytest.raises(PluginError, match="register a gnnbridge.core.interfaces.DatasetSource"):
            dataset_sources.kinds()
