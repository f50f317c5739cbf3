"""The built-in sage, PyG's zoo GraphSAGE and the core sampler pass the suites plugins run against
themselves; so does a third-party PyG model in PyG's own style, and a model that breaks the
output contract fails them with that contract's words."""

import pytest
from torch import nn

from gnnbridge.core.plugins import PluginError
from gnnbridge.testing import registered_plugin
from gnnbridge.testing.conformance import small_graph
from gnnbridge.testing.plugins import ModelConformance, SamplerConformance


class TestSage(ModelConformance):
    arch = "sage"


class TestZooGraphSAGE(ModelConformance):
    arch = "GraphSAGE"


class TestCore(SamplerConformance):
    kind = "core"


class PygStyle(nn.Module):
    """Written as PyG users write models: every layer maps all input nodes to all input nodes,
    so ``forward`` and ``layer_forward`` return a row per *input* node, outputs first."""

    num_layers = 2

    def __init__(self, in_dim, out_dim, hidden=16, short=False):
        from torch_geometric.nn import GATv2Conv, SAGEConv

        super().__init__()
        self.convs = nn.ModuleList([GATv2Conv(in_dim, hidden, heads=1), SAGEConv(hidden, out_dim)])
        self.short = short  # a broken variant: layer_forward returns too few rows

    def forward(self, graph, x):
        for i in range(self.num_layers):
            x = self._layer(i, graph, x)
        return x

    def layer_forward(self, i, graph, x):
        out = self._layer(i, graph, x)
        return out[:3] if self.short else out

    def _layer(self, i, graph, x):
        out = self.convs[i](x, graph.edge_index)
        return out.relu() if i == 0 else out


class ThirdParty:
    from gnnbridge import hookimpl

    @hookimpl
    def register_models(self, register):
        register("pyg-style", {"pyg": PygStyle})
        register("pyg-style-short", {"pyg": lambda in_dim, out_dim, hidden=16: PygStyle(in_dim, out_dim, hidden, True)})


@pytest.fixture
def third_party():
    with registered_plugin(ThirdParty(), "third-party") as p:
        yield p


class TestPygStyle(ModelConformance):
    arch = "pyg-style"

    @pytest.fixture(autouse=True)
    def _registered(self, third_party):
        yield


class ShortLayers(ModelConformance):  # not collected: run by the test below
    arch = "pyg-style-short"


@pytest.mark.parametrize(
    "test", ["test_outputs_keep_the_contract", "test_layerwise_inference_equals_a_full_forward_pass"]
)
def test_a_broken_layer_forward_fails_the_suite_with_the_contract(third_party, test):
    with pytest.raises(PluginError) as err:
        getattr(ShortLayers(), test)("pyg", small_graph(seed=3))
    assert str(err.value).startswith(
        "model 'pyg-style-short' (plugin 'third-party'): layer_forward(0) returned 3 rows for a batch of "
    ), str(err.value)
    assert "expected a 2-D tensor with one row per output node" in str(err.value)
