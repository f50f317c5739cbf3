"""A trained run as a file that runs without gnnbridge, PyG or DGL: the code behind ``gnnbridge export``.

The run's model is rebuilt on its own backend with the checkpoint's weights, its parameters
are renamed to the neutral layout (:mod:`gnnbridge.core.models.neutral`, what ``port`` uses),
and loaded into the pure-torch program of its architecture (:mod:`gnnbridge.core.export.programs`),
which is then traced into the asked format. What the programs do not cover (a plugin's model,
heterogeneous graphs, link and edge tasks, edge features) is refused in one line before anything
is traced or written.

``check`` is the user's copy of the parity test: the file is run by its own runtime on the
run's whole graph (and on ``dataset``, another graph, when given) and compared with
``predict``'s full-neighbourhood logits; a file that disagrees by more than ``atol`` is removed.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from gnnbridge.core import files
from gnnbridge.core.app import inference
from gnnbridge.core.config import ExperimentConfig, Task
from gnnbridge.core.errors import CheckpointError, ConfigError, OutputExistsError
from gnnbridge.core.export import formats
from gnnbridge.core.export.programs import GRAPH_ARCHS, NODE_ARCHS, TYPED_ARCHS, program, type_key
from gnnbridge.core.inference import checkpoint
from gnnbridge.core.models.build import build_model, model_dims
from gnnbridge.core.models.neutral import to_neutral
from gnnbridge.core.plugins import get_target
from gnnbridge.core.records.data import GraphData
from gnnbridge.core.records.hetero import HeteroGraphData

ATOL = 1e-4
EDGE_READERS = ("gat", "gine")  # the built-in architectures that read edge features where there are some
VERSION = 1


def export(
    target: str | os.PathLike,
    fmt: str,
    out: str | os.PathLike,
    *,
    kind: str = checkpoint.BEST,
    check: bool = False,
    dataset=None,
    overrides: list[str] | tuple[str, ...] = (),
    atol: float = ATOL,
) -> dict:
    """Write ``out``, the run's model in format ``fmt`` (``onnx``, ``torch-export``, ``safetensors``).

    :param target: a run folder, or a checkpoint file.
    :param fmt: the format; ``out`` must end in its suffix (``.onnx``, ``.pt2``, ``.safetensors``).
    :param out: the file to write (must not exist).
    :param kind: which of a run folder's checkpoints: ``best`` or ``latest``.
    :param check: run the written file on the run's graph (and on ``dataset``) and require
        ``predict``'s logits within ``atol``; a file that fails is removed.
    :param dataset: with ``check``, a second graph to compare on (a path or a name, as ``predict`` takes).
    :param overrides: ``KEY=VALUE`` data keys (``dataset.path=NEW.npz`` for data that moved).
    :param atol: the largest difference from ``predict``'s logits ``check`` accepts.
    :returns: ``out``, ``format``, the description the file carries (``spec``) and, with
        ``check``, the largest difference on each graph (``checked``)."""
    fmt = formats.check_format(fmt)
    out = _check_out(out, fmt)
    loaded = inference.loaded_checkpoint(target, kind)
    _check_model(*loaded)  # before its config is checked (a user's model would need --trust-code)
    path, state, config = inference.prepared_config(target, kind, "cpu", overrides, "export", False, loaded=loaded)
    data = inference.inference_data(path, state, config, "export", False)
    spec = describe(config, data, state)
    module = with_weights(config, data, state, path, spec)
    with files.reserved(out) as tmp:
        files.publish(out, tmp, lambda f: formats.write(fmt, module, spec, f), "exporting")
    result = {"out": str(out), "format": fmt, "spec": spec}
    if check:
        try:
            result["checked"] = checked(target, kind, out, data, dataset, overrides, atol)
        except BaseException:
            out.unlink(missing_ok=True)  # a file that does not compute what predict does is not left
            raise
    return result


def _check_out(out, fmt: str) -> Path:
    if not isinstance(out, (str, os.PathLike)):
        raise ConfigError(f"out={out!r} must be a path (a str or a pathlib.Path).")
    out, suffix = Path(out), formats.SUFFIXES[fmt]
    if out.suffix != suffix:
        raise ConfigError(f"--out {out} must end in {suffix} for --format {fmt}, e.g. --out model{suffix}.")
    if out.exists() or out.is_symlink():
        raise OutputExistsError(f"'{out}' already exists; choose a new --out (gnnbridge never overwrites a file).")
    return out


def _check_model(path: Path, state: dict) -> None:
    """Refuse, naming why, an architecture with no exported program (the checkpoint's own config)."""
    trained = state["config"]
    arch, task = trained["model"]["arch"], trained["task"]
    archs = {Task.NODE.value: NODE_ARCHS, Task.GRAPH.value: GRAPH_ARCHS, Task.LINK.value: TYPED_ARCHS}.get(task)
    if archs is not None and arch not in archs:
        raise ConfigError(
            f"{path} cannot be exported yet: model.arch={arch} has no exported program for {task} tasks "
            f"(built in: {', '.join(archs)})."
        )


def describe(config: ExperimentConfig, data, state: dict) -> dict:
    """What the file computes, as plain values (it travels inside the file); refuses, in one
    line, a run the programs do not cover."""
    spec, why = config.model, unexportable(config, data)
    if why:
        raise ConfigError(f"{state['path']} cannot be exported yet: {why}.")
    common = {
        "format": "gnnbridge-export",
        "version": VERSION,
        "arch": spec.arch,
        "hidden": spec.hidden,
        "layers": spec.layers,
        "scaled": _scale(config, state) is not None,
        "target": config.target,
        "trained_on": config.backend,
    }
    if isinstance(data, HeteroGraphData):
        return common | _typed(data, config)
    graph = config.kind is Task.GRAPH
    in_dim, out_dim = model_dims(data)
    features = getattr(data, "edge_attr", None)
    edge_dim = int(features.shape[1]) if features is not None and spec.arch in EDGE_READERS else 0
    inputs = ["x", "edge_index", "batch"] if graph else ["x", "edge_index"]
    return common | {
        "task": "graph" if graph else "node",
        "in_dim": int(in_dim),
        "out_dim": int(out_dim),
        "heads": spec.heads,
        "pooling": spec.pooling,
        "edge_dim": edge_dim,
        "inputs": inputs + (["edge_attr"] if edge_dim else []),
        "output": "logits",
    }


def _typed(data: HeteroGraphData, config: ExperimentConfig) -> dict:
    """A heterogeneous graph's inputs (one per node type and per given relation), the reverse
    relations the program makes by flipping their mirror, and its outputs."""
    dims = data.feature_dims()
    mirrors = [[list(rev), list(et)] for rev, et in _mirrors(data).items()]
    given = [et for et in data.edge_types if tuple(et) not in {tuple(r) for r, _ in mirrors}]
    inputs = [f"{'x' if dims[t] else 'ids'}__{t}" for t in dims]
    inputs += [f"edge_index__{type_key(et)}" for et in given]
    link = data.is_link
    ends = list(dict.fromkeys([data.target_edge[0], data.target_edge[2]])) if link else []
    return {
        "task": "link" if link else "node",
        "typed": True,
        "in_dims": {t: int(w) for t, w in dims.items()},
        "num_nodes": {t: int(data.num_nodes[t]) for t in dims},
        "edge_types": [list(et) for et in data.edge_types],
        "mirrors": mirrors,
        "inputs": inputs,
        "out_dim": int(data.num_classes) if not link else int(config.model.hidden),
        "target": list(data.target_edge) if link else data.target_node,
        "outputs_of": ends,
        "output": [f"states__{t}" for t in ends] if link else "logits",
        "decoder": "dot: score(s, d) = sum(states__SRC[s] * states__DST[d])" if link else None,
    }


def _mirrors(data: HeteroGraphData) -> dict[tuple, tuple]:
    """``{reverse type: its mirror}`` for each ``rev_`` type whose edges are exactly its mirror's
    flipped (what ``dataset.reverse_edges`` adds): the program flips them instead of asking."""
    types = {tuple(et) for et in data.edge_types}
    found = {}
    for src, rel, dst in types:
        mirror = (dst, rel.removeprefix("rev_"), src)
        if rel.startswith("rev_") and mirror in types and _flipped(data, (src, rel, dst), mirror):
            found[(src, rel, dst)] = mirror
    return found


def _flipped(data: HeteroGraphData, et: tuple, mirror: tuple) -> bool:
    a, b = data.edge_index[et], data.edge_index[mirror].flip(0)
    if a.shape != b.shape:
        return False
    width = int(max(data.num_nodes[et[0]], data.num_nodes[et[2]], 1))
    return torch.equal(torch.sort(a[0] * width + a[1]).values, torch.sort(b[0] * width + b[1]).values)


def unexportable(config: ExperimentConfig, data) -> str | None:
    """Why ``config``'s model has no exported program (None: it has one)."""
    arch, kind = config.model.arch, config.kind
    if isinstance(data, HeteroGraphData):
        return _typed_unexportable(config, data)
    if kind not in (Task.NODE, Task.GRAPH):
        return f"task={config.task} has no exported program (node and graph tasks do)"
    archs = NODE_ARCHS if kind is Task.NODE else GRAPH_ARCHS
    if arch not in archs:
        return f"model.arch={arch} has no exported program for {kind.value} tasks (built in: {', '.join(archs)})"
    return None


def _typed_unexportable(config: ExperimentConfig, data: HeteroGraphData) -> str | None:
    if config.kind is Task.EDGE:
        return "task=edge has no exported program yet (node and link tasks on typed graphs do)"
    if config.model.arch not in TYPED_ARCHS:
        return f"model.arch={config.model.arch} on a heterogeneous graph has no exported program (built in: sage)"
    if data.is_link and config.model.options.get("decoder", "dot") != "dot":
        return "the mlp link decoder has no exported program yet (the dot decoder's encoder does)"
    return None


def _scale(config: ExperimentConfig, state: dict):
    """A fitted regression's label scale (its outputs are standard units), or None."""
    fitted = get_target(config.target).restored(state.get("target"))
    if fitted.state() is None:
        return None
    scale = getattr(fitted, "scale", None)
    if scale is None or not hasattr(scale, "mean"):
        raise ConfigError(
            f"target={config.target} fits a state the exported program cannot apply; it cannot be exported."
        )
    return scale


def with_weights(config: ExperimentConfig, data, state: dict, path: Path, spec: dict) -> torch.nn.Module:
    """The program of ``spec`` holding the checkpoint's weights (through the neutral names)."""
    model, choice = build_model(config.model, config.backend, config.kind, *model_dims(data), data)
    checkpoint.load_model_state(model, state, path, data)
    weights = to_neutral(model, model.state_dict(), choice.origin)
    # The library's neighbour-sum layers of GIN and GINE hold only their fixed epsilon (0, a buffer).
    weights = {k: v for k, v in weights.items() if not (spec["task"] == "graph" and k.startswith("convs."))}
    scale = _scale(config, state)
    if scale is not None:
        weights |= {"units.mean": scale.mean.reshape(-1), "units.std": scale.std.reshape(-1)}
    module = program(spec)
    try:
        module.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in weights.items()})
    except RuntimeError as exc:  # a layout the program does not know: a bug here, named in one line
        raise CheckpointError(f"{path}: the weights do not fit the exported {spec['arch']} program ({exc}).") from None
    return module


def graph_inputs(data, spec: dict) -> tuple[torch.Tensor, ...]:
    """The program's inputs for a whole graph: ``(x, edge_index[, batch])`` (every graph of a
    collection), or a typed graph's one per name in ``spec["inputs"]``."""
    if isinstance(data, HeteroGraphData):
        return tuple(_typed_input(data, name) for name in spec["inputs"])
    x = torch.as_tensor(data.x).float()
    features = (torch.as_tensor(data.edge_attr).float(),) if spec.get("edge_dim") else ()
    if isinstance(data, GraphData):  # edge features are in the CSC order of ``indices``
        dst = torch.repeat_interleave(torch.arange(data.num_nodes), data.indptr.diff())
        return x, torch.stack([torch.as_tensor(data.indices).long(), dst]), *features
    batch = torch.repeat_interleave(torch.arange(data.node_ptr.numel() - 1), data.node_ptr.diff())
    return x, torch.as_tensor(data.edge_index).long(), batch, *features


def _typed_input(data: HeteroGraphData, name: str) -> torch.Tensor:
    kind, rest = name.split("__", 1)
    if kind == "x":
        return torch.as_tensor(data.x[rest]).float()
    if kind == "ids":
        return torch.arange(data.num_nodes[rest])
    return torch.as_tensor(data.edge_index[tuple(rest.split("__"))]).long()


def expected_outputs(target, kind: str, handed, overrides, spec: dict) -> list[np.ndarray]:
    """What ``predict`` computes for the program's outputs: logits, or a link encoder's final
    states of each end type (``predict --embeddings``)."""
    if spec["task"] != "link":
        return [inference.predict(target, kind=kind, dataset=handed, overrides=overrides)["logits"]]
    arrays = inference.predict(target, kind=kind, dataset=handed, overrides=overrides, embeddings=True)
    return [arrays[f"embedding__{t}"] for t in spec["outputs_of"]]


def checked(target, kind: str, out: Path, data, dataset, overrides, atol: float) -> dict[str, float]:
    """``{graph: largest |file - predict|}`` on the run's graph and on ``dataset``; raises past ``atol``."""
    graphs = {"the run's graph": (data, None)}
    if dataset is not None:
        _, state, config = inference.prepared_config(target, kind, "cpu", overrides, "export", False, dataset)
        graphs[str(dataset)] = (inference.inference_data(Path(state["path"]), state, config, "export", False), dataset)
    found, spec = {}, formats.describe_file(out)
    for name, (graph, handed) in graphs.items():
        expected = expected_outputs(target, kind, handed, overrides, spec)
        got = formats.run(out, graph_inputs(graph, spec))
        diff = max((float(np.abs(g.reshape(e.shape) - e).max()) if e.size else 0.0) for g, e in zip(got, expected))
        if not diff <= atol:
            raise CheckpointError(
                f"{out} differs from predict on {name} by {diff:.3g} (more than {atol:g}); it was removed."
            )
        found[name] = diff
    return found
