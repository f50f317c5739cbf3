import subprocess
import sys

import pytest

from gnnbridge import hookimpl
from gnnbridge.core import plugins
from gnnbridge.core.errors import UnknownNameError
from gnnbridge.plugins.datasets import synthetic_graph
from gnnbridge.testing import registered_plugin


class InlineDatasetPlugin:
    @hookimpl
    def register_datasets(self, register):
        register("tiny", lambda config, seed: synthetic_graph(60, 2, 4, 4.0, 0.9, 1.0, seed), "tiny test graph")


@pytest.fixture
def inline_plugin():
    with registered_plugin(InlineDatasetPlugin(), "inline-test") as plugin:
        yield plugin


def test_builtin_plugins_register_through_hooks():
    names = {p["name"]: p["hooks"] for p in plugins.plugin_info()}
    assert (
        names["pyg"]
        == names["dgl"]
        == [
            "register_backends",
            "register_dataset_libraries",
            "register_graph_readers",
            "register_models",
        ]
    )
    assert names["samplers"] == ["register_samplers"]
    assert "register_datasets" in names["datasets"]
    assert {"pyg", "dgl"} <= set(plugins.backends.names())
    assert {"synthetic", "karate", "npz"} <= set(plugins.datasets.names())


def test_unknown_name_lists_what_is_available():
    with pytest.raises(UnknownNameError) as err:
        plugins.backends.get("dlg")
    msg = str(err.value)
    assert msg.startswith("Unknown backend 'dlg' (did you mean 'dgl'?). Available: dgl, pyg")


def test_a_third_party_plugin_adds_a_dataset(inline_plugin):
    assert "tiny" in plugins.datasets.names()
    assert plugins.datasets.get("tiny")(None, 0).num_nodes == 60


def test_duplicate_names_are_refused(inline_plugin):
    class Dup:
        @hookimpl
        def register_datasets(self, register):
            register("tiny", None, "again")

    with registered_plugin(Dup(), "dup-test"):
        with pytest.raises(plugins.PluginError, match="registered twice"):
            plugins.datasets.names()


def test_env_var_restricts_loaded_plugins():
    code = "from gnnbridge.core import plugins; print(sorted(plugins.backends.names()))"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "GNNBRIDGE_LOAD_PLUGINS": "pyg"},
    )
    assert proc.stdout.strip() == "['pyg']", proc.stderr
