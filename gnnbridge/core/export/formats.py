"""Writing and running the three export formats, each through its own library.

* ``onnx``: ``torch.onnx.export(dynamo=True)`` (the ``torch.export``-based exporter; the
  TorchScript one is deprecated), run by onnxruntime. N, E (and a graph task's node count for
  ``batch``) are dynamic axes.
* ``torch-export``: ``torch.export.export`` with the same dynamic dimensions, saved as ``.pt2``
  and run with ``torch.export.load(FILE).module()``.
* ``safetensors``: the weights under their neutral names, with the description (architecture,
  widths, task) as the file's JSON metadata; :func:`load` rebuilds the torch program.

The description travels inside every file (ONNX metadata, a ``.pt2`` extra file, safetensors
metadata) under :data:`KEY`, so a file says what it computes without the run folder.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import warnings
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

from gnnbridge.core.errors import CheckpointError, ConfigError
from gnnbridge.core.export.programs import program

FORMATS = ("onnx", "torch-export", "safetensors")
SUFFIXES = {"onnx": ".onnx", "torch-export": ".pt2", "safetensors": ".safetensors"}
KEY = "gnnbridge"
NEEDS = {"onnx": ("onnx", "onnxscript"), "safetensors": ("safetensors",)}


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r} is not an export format; choose one of: {', '.join(FORMATS)}.")
    missing = [m for m in NEEDS.get(fmt, ()) if not _importable(m)]
    if missing:
        raise ConfigError(
            f"--format {fmt} needs {' and '.join(missing)}, which is not installed here: "
            "pip install 'gnnbridge[export]'."
        )
    return fmt


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def example_inputs(spec: dict) -> tuple[torch.Tensor, ...]:
    """A small graph to trace with: sizes chosen apart (7 nodes, 11 edges, 2 graphs; a typed
    graph's types and relations each their own) so no two dynamic dimensions are taken for one."""
    gen = torch.Generator().manual_seed(0)
    if spec.get("typed"):
        return _typed_example(spec, gen)
    x = torch.randn(7, spec["in_dim"], generator=gen)
    edge_index = torch.randint(0, 7, (2, 11), generator=gen)
    features = (torch.randn(11, spec["edge_dim"], generator=gen),) if spec.get("edge_dim") else ()
    if spec["task"] == "graph":
        return x, edge_index, torch.tensor([0, 0, 0, 1, 1, 1, 1]), *features
    return x, edge_index, *features


def _typed_example(spec: dict, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    types = list(spec["in_dims"])
    sizes = {t: 7 + 2 * k for k, t in enumerate(types)}
    out, edges = [], 0
    for name in spec["inputs"]:
        kind, rest = name.split("__", 1)
        if kind == "x":
            out.append(torch.randn(sizes[rest], spec["in_dims"][rest], generator=gen))
        elif kind == "ids":
            out.append(torch.randint(0, spec["num_nodes"][rest], (sizes[rest],), generator=gen))
        else:
            src, _, dst = rest.split("__")
            count = 31 + 2 * edges
            edges += 1
            out.append(torch.stack([torch.randint(0, sizes[t], (count,), generator=gen) for t in (src, dst)]))
    return tuple(out)


def dynamic_shapes(spec: dict) -> dict:
    if spec.get("typed"):
        return {"flat": tuple(_typed_dims(spec, name) for name in spec["inputs"])}
    nodes, edges = torch.export.Dim("num_nodes", min=2), torch.export.Dim("num_edges", min=2)
    shapes = {"x": {0: nodes}, "edge_index": {1: edges}}
    if spec["task"] == "graph":
        shapes["batch"] = {0: nodes}
    if spec.get("edge_dim"):
        shapes["edge_attr"] = ({0: edges},)  # the programs' trailing *edge_attr
    return shapes


def _typed_dims(spec: dict, name: str) -> dict:
    kind, rest = name.split("__", 1)
    if kind in ("x", "ids"):
        return {0: torch.export.Dim(f"num_nodes__{rest}", min=2)}
    return {1: torch.export.Dim(f"num_edges__{rest}", min=2)}


def output_names(spec: dict) -> list[str]:
    return list(spec["output"]) if isinstance(spec["output"], list) else [spec["output"]]


@contextlib.contextmanager
def _quiet():
    """The exporters' own chatter (torchvision ops skipped, attribute-type notes) is not the user's
    concern; a real failure still raises."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript")]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def write(fmt: str, module: torch.nn.Module, spec: dict, f: BinaryIO) -> None:
    """Write ``module`` (a :func:`~gnnbridge.core.export.programs.program` with its weights) to
    the open binary file ``f``."""
    text = json.dumps(spec, sort_keys=True)
    if fmt == "safetensors":
        from safetensors.torch import save

        f.write(save({k: v.contiguous() for k, v in module.state_dict().items()}, metadata={KEY: text}))
        return
    args = example_inputs(spec)
    with _quiet(), torch.no_grad():
        if fmt == "torch-export":
            program_ = torch.export.export(module, args, dynamic_shapes=dynamic_shapes(spec))
            torch.export.save(program_, f, extra_files={f"{KEY}.json": text})
            return
        onnx_program = torch.onnx.export(
            module,
            args,
            dynamic_shapes=dynamic_shapes(spec),
            dynamo=True,
            input_names=list(spec["inputs"]),
            output_names=output_names(spec),
            verbose=False,
        )
        import onnx

        proto = onnx_program.model_proto
        onnx.helper.set_model_props(proto, {KEY: text})
        onnx.save(proto, f)


def describe_file(path: str | os.PathLike) -> dict:
    """The description a file written by :func:`write` carries."""
    path = Path(path)
    try:
        if path.suffix == ".onnx":
            import onnx

            props = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
            return json.loads(props[KEY])
        if path.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(path), "pt") as f:
                return json.loads(f.metadata()[KEY])
        extra = {f"{KEY}.json": ""}
        torch.export.load(str(path), extra_files=extra)
        return json.loads(extra[f"{KEY}.json"])
    except (KeyError, TypeError, ValueError, OSError, RuntimeError) as exc:
        raise CheckpointError(f"'{path}' is not a file gnnbridge export wrote ({type(exc).__name__}).") from None


def load(path: str | os.PathLike) -> torch.nn.Module:
    """The torch program of a ``.safetensors`` file written by ``gnnbridge export``.

    :param path: the ``.safetensors`` file.
    :returns: a ``torch.nn.Module`` in eval mode, called as ``model(x, edge_index)`` (graph tasks:
        ``model(x, edge_index, batch)``), its description (architecture, widths, task) in
        ``model.description``; no PyG or DGL is imported."""
    from safetensors.torch import load_file

    spec = describe_file(path)
    module = program(spec)
    module.load_state_dict(load_file(str(path)), strict=True)
    module.description = spec
    return module


def run(path: str | os.PathLike, inputs: tuple[torch.Tensor, ...]) -> list[np.ndarray]:
    """The outputs of an exported file on ``inputs``, computed by the format's own runtime (a
    list: one array, or a link encoder's states of each end type)."""
    path = Path(path)
    with torch.no_grad():
        if path.suffix == ".onnx":
            import onnxruntime

            session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            given = dict(zip(describe_file(path)["inputs"], inputs))  # by name: an input no output reads is dropped
            return list(session.run(None, {i.name: given[i.name].numpy() for i in session.get_inputs()}))
        module = load(path) if path.suffix == ".safetensors" else torch.export.load(str(path)).module()
        out = module(*inputs)
        return [t.numpy() for t in (out if isinstance(out, (tuple, list)) else (out,))]
