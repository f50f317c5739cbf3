"""A model the user built and hands over as an instance (``gnnbridge.run(model=my_model)``),
written in its library's idiom, not against gnnbridge's ``forward(graph, x)``.

The backends recognise their library's idiom from ``forward``'s parameter names (PyG's
``forward(x, edge_index)``, given the batch's ``edge_attr`` too where it takes one; DGL's
``forward(g, x)`` or ``forward(blocks, x)``) and wrap the instance so it takes their batches
(``Backend.adopt_model``). Core keeps the instance itself in
a file: it is pickled by cloudpickle, which writes a class defined in a script's or notebook's
``__main__`` by value (its code travels with it) and an importable class by reference. Ranks,
``evaluate``, ``predict`` and ``--resume`` rebuild it from that file. Unpickling runs the code
it holds, so ``evaluate``, ``predict``, ``load`` and ``port`` do it only when trusted
(``trust_code=True``, ``--trust-code``), as for a class named by import path.
"""

from __future__ import annotations

import inspect
import pickle

from torch import nn

from gnnbridge.core.errors import ConfigError
from gnnbridge.core.records.batches import IndexedRows

PREFIX = "instance:"  # model.arch of a run whose model is a saved instance: instance:PATH
PYG_FIRST = ("x", "h", "feat", "feats", "features")
DGL_GRAPHS = ("g", "graph", "block")
DGL_BLOCKS = ("blocks", "mfgs")


def forward_names(model: nn.Module) -> list[str]:
    """The names of ``model.forward``'s positional parameters (``self`` left out)."""
    try:
        params = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def idiom(model: nn.Module) -> str | None:
    """``pyg`` (``forward(x, edge_index)``), ``dgl-graph`` (``forward(g, x)``), ``dgl-blocks``
    (``forward(blocks, x)``), or None."""
    names = forward_names(model)
    if len(names) >= 2 and names[0] in PYG_FIRST and names[1] in ("edge_index", "adj_t"):
        return "pyg"
    if len(names) >= 2 and names[0] in DGL_BLOCKS:
        return "dgl-blocks"
    if len(names) >= 2 and names[0] in DGL_GRAPHS:
        return "dgl-graph"
    return None


IDIOMS = "PyG's forward(x, edge_index), DGL's forward(g, x) or forward(blocks, x)"
# Graph classification, as each library's tutorials write it: PyG pools by ``batch``; DGL's
# forward(g, x) reads out over a batched graph (dgl.mean_nodes).
GRAPH_IDIOMS = "PyG's forward(x, edge_index, batch), DGL's forward(g, x) on a batched graph"


def takes(model: nn.Module, name: str) -> bool:
    """Whether ``model.forward`` has a parameter called ``name`` (keyword-only ones too)."""
    return _parameter(model, name) is not None


def requires(model: nn.Module, name: str) -> bool:
    """Whether ``model.forward`` has a parameter called ``name`` without a default."""
    param = _parameter(model, name)
    return param is not None and param.default is param.empty


def _parameter(model: nn.Module, name: str) -> inspect.Parameter | None:
    try:
        return inspect.signature(model.forward).parameters.get(name)
    except (TypeError, ValueError):
        return None


# The parameter a PyG forward takes each batch's edge features by (PyG's own name, as its layers
# that read them, GINEConv or GATConv(edge_dim=...), call it): it gets them, a row per edge of
# edge_index, wherever the graph has some.
EDGE_FEATURES = "edge_attr"


def check_edge_features(model: nn.Module, name: str, data) -> None:
    """One line for a PyG forward that must be given edge features (``edge_attr`` without a
    default) on a graph that has none: it would fail at its first call, or train without them."""
    if idiom(model) == "pyg" and requires(model, EDGE_FEATURES) and getattr(data, "edge_attr", None) is None:
        raise ConfigError(
            f"{name} has forward({', '.join(forward_names(model))}), which takes each batch's edge features, "
            "but the graph has none; give it edge features (edge_attr [E, D] in an .npz or a PyG Data, "
            "g.edata['feat'] in DGL), or edge_attr a default (edge_attr=None)."
        )


class UserModel(nn.Module):
    """What a backend's ``adopt_model`` returns: the user's instance held as ``user_model`` (what
    ``gnnbridge.load`` hands back); a subclass says how the backend's batch reaches it."""

    def __init__(self, user_model: nn.Module):
        super().__init__()
        self.user_model = user_model

    @staticmethod
    def rows(x):
        """The batch's input rows, gathered: a user's layers read a tensor, not :class:`IndexedRows`."""
        return x.rows() if isinstance(x, IndexedRows) else x


def dump(model: nn.Module) -> bytes:
    """``model`` pickled, its class by value where it lives in ``__main__`` (see the module docstring)."""
    import cloudpickle

    return cloudpickle.dumps(model)


def load(path) -> nn.Module:
    """The instance saved in ``path`` (a fresh copy each call)."""
    with open(path, "rb") as f:
        return pickle.load(f)  # noqa: S301 - the caller checked that code may run (code_allowed)
