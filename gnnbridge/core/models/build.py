"""From ``model.arch`` to a ``torch.nn.Module``, and calls into it that name whose model failed.

``model.arch`` is a name from the ``register_models`` hook (built-in or a plugin's, for the
chosen backend and task) or a class by import path, ``my_lab.models:DeepSAGE``, imported with
the current folder on ``sys.path`` (as ``uvicorn module:app`` does). Every builder is called the
same way, so one contract serves registered models, classes and PyG's zoo::

    build(in_dim, out_dim, **kw)

``kw`` holds those of ``hidden``, ``layers``, ``dropout``, ``aggr``, ``heads``, ``pooling`` (the
``model.*`` values), ``spec`` (the whole :class:`ModelSpec`) and ``data`` (the dataset) that the
builder's signature names, plus every ``model.options`` entry. Naming is the opt-in: a model
reads what it declares and nothing is forced on a ``**kwargs`` it forwards to its layers.

The model's ``forward(graph, x)`` gets the backend's native batch graph (PyG: a ``Data`` with
``edge_index``, ``n_id``, ``batch_size`` and per-hop counts; DGL: a list of blocks, input layer
first; graph tasks: the library's batched graph) and ``x``, the features of the batch's input
nodes, seeds first. It returns floating-point logits on the batch's device for the seeds (or
for every input node: core keeps the first rows). Optional: ``layer_forward(i, graph, x)`` and
``num_layers`` for exact layer-wise evaluation (else evaluation is full-neighbourhood sampling,
as exact for layers that read only in-neighbours): ``graph`` is a one-hop graph, and the same
rule holds (a row per output node, or per input node with the outputs first), and
``bind(data)``. :class:`ModelCall` checks all of it, per call and, for finiteness, on the dry
step before the first epoch (``core/training/dry.py``).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gnnbridge.core.config import ModelSpec, Task
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.models import instance
from gnnbridge.core.models.generated import removing_generated_modules
from gnnbridge.core.plugins import (
    ANY_BACKEND,
    PluginError,
    backends,
    blame,
    code_allowed,
    code_switch,
    is_plugin_fault,
    models,
    stdout_to_stderr,
)

INJECTED = ("hidden", "layers", "dropout", "aggr", "heads", "pooling")
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@dataclass
class ModelChoice:
    """What ``model.arch`` resolved to for one backend: the builder and who provides it."""

    arch: str
    build: Callable[..., Any]
    origin: str  # names the model and its plugin (or class) in every message about it
    heterogeneous: bool = False  # it also builds for heterogeneous data (and so for task=link)


def resolve(spec: ModelSpec, backend: str, task: Task) -> ModelChoice:
    """The builder ``spec.arch`` names on ``backend`` for ``task``, or one line saying why none."""
    if spec.arch.startswith(instance.PREFIX):
        return _saved_instance(spec.arch.removeprefix(instance.PREFIX), backend, task)
    if ":" in spec.arch:
        return _import_class(spec.arch, backend)
    comp = models.get(spec.arch, backend, task)
    return ModelChoice(spec.arch, comp.build, f"model '{comp.name}' (plugin '{comp.plugin}')", comp.heterogeneous)


def _saved_instance(path: str, backend: str, task: Task) -> ModelChoice:
    """A model instance the user handed over, saved by ``gnnbridge.core.app.objects``: each build
    is a fresh copy of it, as it was handed over, in ``backend``'s wrapper."""
    if not code_allowed():
        raise ConfigError(
            f"The checkpoint's model is an instance saved in '{path}'; loading it runs the code it holds, "
            f"so evaluate, predict, load and port do that only with {code_switch()}."
        )
    if not os.path.isfile(path):
        raise ConfigError(
            f"The run's model was saved in '{path}', which no longer exists; it cannot be rebuilt (train again)."
        )
    model = instance.load(path)
    name = f"your model (class '{type(model).__qualname__}')"
    if task in (Task.LINK, Task.EDGE):
        raise ConfigError(
            f"{name} trains node and graph tasks (task=node, task=graph), not task={task.value}, whose models "
            "score (source, destination) pairs; use a built-in model or a class by import path "
            "(model.arch=module:Class)."
        )
    written = instance.idiom(model)
    if task is Task.GRAPH and (written == "dgl-blocks" or (written == "pyg" and not instance.takes(model, "batch"))):
        raise ConfigError(
            f"{name} has forward({', '.join(instance.forward_names(model))}), which cannot pool a batch of "
            f"graphs into a row each; task=graph trains {instance.GRAPH_IDIOMS}."
        )
    if backends.get(backend).adopt_model(model) is None:
        raise ConfigError(
            f"{name} is written as {written or 'neither'} (forward({', '.join(instance.forward_names(model))})), "
            f"which backend '{backend}' does not train; gnnbridge trains {instance.IDIOMS}"
            + (f" on the library whose idiom it is (--backend {written.split('-')[0]})." if written else ".")
        )

    def build(in_dim, out_dim, data):
        model = instance.load(path)
        instance.check_edge_features(model, name, data)
        return backends.get(backend).adopt_model(model)

    return ModelChoice(instance.PREFIX + path, build, name)


def _import_class(path: str, backend: str) -> ModelChoice:
    if not code_allowed():
        raise ConfigError(
            f"The checkpoint's model is the class '{path}'; importing code a checkpoint names runs "
            f"it, so evaluate, predict, load and port do that only with {code_switch()}."
        )
    module_name, _, attr = path.partition(":")
    if os.getcwd() not in sys.path:  # once, for good: spawned ranks inherit the parent's sys.path
        sys.path.insert(0, os.getcwd())
    try:
        with stdout_to_stderr():
            module = importlib.import_module(module_name)
    except BaseException as exc:  # noqa: BLE001 - whatever the user's module raises on import (sys.exit too)
        if not is_plugin_fault(exc):
            raise
        raise ConfigError(
            f"model.arch='{path}': module '{module_name}' cannot be imported ({type(exc).__name__}: "
            f"{_line(exc)}); it must be importable from the current folder or PYTHONPATH."
        ) from None
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
    if not (isinstance(obj, type) and issubclass(obj, nn.Module)):
        found = sorted(
            n
            for n, v in vars(module).items()
            if isinstance(v, type) and issubclass(v, nn.Module) and v.__module__ == module.__name__
        )
        raise ConfigError(
            f"model.arch='{path}': '{attr}' is not a torch.nn.Module class in '{module_name}'; "
            f"classes there: {', '.join(found) or 'none'}."
        )
    registered = _registered_for(obj, backend)
    if registered is not None:  # a class a plugin already builds (PyG's zoo): its builder, not the bare class
        return ModelChoice(path, registered.build, f"model '{registered.name}' (plugin '{registered.plugin}')")
    written_for = getattr(obj, "backends", None)
    if written_for and backend not in written_for:
        raise ConfigError(
            f"model.arch='{path}' is written for backend {', '.join(written_for)}, not '{backend}'; "
            f"use --backend {written_for[0]}."
        )
    return ModelChoice(path, obj, f"class '{path}'", bool(getattr(obj, "heterogeneous", False)))


def _registered_for(cls: type, backend: str):
    """The model a plugin registered for ``backend`` whose builder says it builds ``cls`` (its
    ``builds`` attribute: the class's import path), or None. A library's own model classes take
    their own constructor arguments, which their plugin's builder fills from the data and the
    ``model.*`` keys; named by path, they are built the same way."""
    where = {f"{cls.__module__}.{cls.__qualname__}", f"{cls.__module__.rsplit('.', 1)[0]}.{cls.__qualname__}"}
    found = [comp for comp in models.entries() if getattr(comp.build, "builds", None) in where]
    mine = next((comp for comp in found if comp.backend in (backend, ANY_BACKEND)), None)
    if found and mine is None:
        others = sorted({comp.backend for comp in found})
        raise ConfigError(
            f"model.arch='{cls.__qualname__}' by path is model '{found[0].name}' of backend {', '.join(others)}, "
            f"not '{backend}'; use --backend {others[0]}."
        )
    return mine


def arguments(choice: ModelChoice, spec: ModelSpec, data: Any) -> dict[str, Any]:
    """The keyword arguments the builder gets (see the module docstring), checked against its
    signature so a wrong option is one line naming it and the parameters there are."""
    try:
        params = list(inspect.signature(choice.build).parameters.values())
    except (TypeError, ValueError):  # no signature to read (a C extension): options alone
        return dict(spec.options)
    positional = [p for p in params if p.kind in _POSITIONAL]
    if len(positional) < 2 and not any(p.kind is p.VAR_POSITIONAL for p in params):
        raise PluginError(
            f"{choice.origin} must take (in_dim, out_dim, ...) as its first two arguments; its "
            f"signature is {choice.build.__name__}{inspect.signature(choice.build)}."
        )
    named = [p.name for p in params if p.kind in (*_POSITIONAL, p.KEYWORD_ONLY)][2:]
    offered = {**{n: getattr(spec, n) for n in INJECTED}, "spec": spec, "data": data}
    kwargs = {n: offered[n] for n in named if n in offered}
    for key in spec.options:
        if key in kwargs:  # the builder names it: gnnbridge passes it (an option of another name may not)
            where = f"model.{key}" if key in INJECTED else "gnnbridge"
            raise ConfigError(f"model.options.{key} is set by {where}; remove it from model.options.")
        if key not in named and not any(p.kind is p.VAR_KEYWORD for p in params):
            raise ConfigError(
                f"model.options.{key} is not a parameter of {choice.origin}; its parameters: "
                f"{', '.join(named) or 'none beyond in_dim, out_dim'}."
            )
    return {**kwargs, **spec.options}


def injected_reads(choice: ModelChoice) -> set[str]:
    """The ``model.*`` values (of :data:`INJECTED`) the builder reads: those its signature names,
    or all of them when it takes ``spec``. A message may tell a user to change only these."""
    try:
        params = inspect.signature(choice.build).parameters
    except (TypeError, ValueError):
        return set()
    return set(INJECTED) if "spec" in params else {n for n in INJECTED if n in params}


def construct(choice: ModelChoice, spec: ModelSpec, in_dim: int, out_dim: int, data: Any) -> nn.Module:
    """Call the builder; exceptions are the caller's to name (see :func:`build_model`). The module
    files a library generates into the temp folder meanwhile are removed (:mod:`.generated`)."""
    with removing_generated_modules():
        model = choice.build(in_dim, out_dim, **arguments(choice, spec, data))
    if not isinstance(model, nn.Module):
        raise PluginError(f"{choice.origin} built a {type(model).__name__}, not a torch.nn.Module.")
    if not any(p.requires_grad for p in model.parameters()):  # torch's optimizer: "an empty parameter list"
        frozen = sum(1 for _ in model.parameters())
        which = f"all {frozen} have requires_grad=False" if frozen else "none"
        built = "" if choice.arch.startswith(instance.PREFIX) else f", built with {_spec_text(spec)}"
        raise PluginError(
            f"{choice.origin} has no parameter to train ({which}{built}); give it a layer with weights (nn.Linear, "
            "a graph convolution), or leave requires_grad on."
        )
    return model


def build_model(
    spec: ModelSpec, backend: str, task: Task, in_dim: int, out_dim: int, data: Any
) -> tuple[nn.Module, ModelChoice]:
    choice = resolve(spec, backend, task)
    try:
        model = construct(choice, spec, in_dim, out_dim, data)
    except BaseException as exc:  # noqa: BLE001 - the builder is a plugin's code (sys.exit too)
        if not is_plugin_fault(exc):
            raise
        raise PluginError(
            f"{choice.origin} could not be built with {_spec_text(spec)}: {type(exc).__name__}: {_line(exc)}"
        ) from None
    if hasattr(model, "bind"):
        with blame(choice.origin, "bind(data)"):
            model.bind(data)
    return model, choice


def check_heterogeneous(choice: ModelChoice, why: str) -> None:
    """One line when ``why`` (heterogeneous data, or task=link) needs a model that builds for it."""
    if not choice.heterogeneous:
        hetero = sorted({c.name for c in models.entries() if c.heterogeneous})
        example = "sage" if "sage" in hetero or not hetero else hetero[0]  # the simplest, where installed
        raise ConfigError(
            f"{choice.origin} is built for homogeneous graphs, but {why}; use a heterogeneous model: "
            f"{', '.join(hetero) or 'none installed'} (e.g. --set model.arch={example}), "
            "or a class with heterogeneous = True."
        )


def model_dims(data: Any) -> tuple[Any, int]:
    """``(in_dim, out_dim)`` a builder gets: feature and class counts, or for heterogeneous data
    ``{node type: feature width (0: featureless)}`` and the class count (1 for link scores)."""
    if hasattr(data, "feature_dims"):
        return data.feature_dims(), data.num_classes if not data.is_link else 1
    return data.num_features, data.num_classes


def count_parameters(spec: ModelSpec, backend: str, task: Task, in_dim: int, out_dim: int, data: Any) -> int | None:
    """The model's exact parameter count, built on the meta device (no memory is allocated, so a
    model too large for the machine is counted, not built), or None when the builder cannot run
    there (it reads values out of tensors, or its layers are lazy). Config errors are raised."""
    choice = resolve(spec, backend, task)
    try:
        with torch.device("meta"):
            model = construct(choice, spec, in_dim, out_dim, data)
        return sum(p.numel() for p in model.parameters())
    except BaseException as exc:  # noqa: BLE001 - not buildable on meta: the caller estimates, then builds on CPU
        if not is_plugin_fault(exc):  # (where a builder that exits or fails is named)
            raise
        return None


class ModelCall:
    """Calls into a model (training and evaluation alike) that end in one line naming the model
    and the method when it raises or returns something other than what the loop needs: a
    floating-point tensor on the batch's device with one row per output (seed, graph or pair)
    and a column per class.

    One contract for ``forward`` and ``layer_forward``: either may return a row per *input*
    node with the outputs first (the natural PyG style); gnnbridge keeps the first rows.
    ``per_graph``: a graph task's model returns exactly one row per graph (a row per node would
    be a model that forgot to pool, and its first rows are not the graphs)."""

    def __init__(self, origin: str, num_classes: int, per_graph: bool = False):
        self.origin = origin
        self.num_classes = num_classes
        self.per_graph = per_graph
        # What each call into the model tells the rank's watchdog (DistContext.doing), inside a
        # ``watched`` block: a model that never returns there ends the job after --timeout.
        self.tell: Callable[[str | None], None] | None = None
        self._activity: str | None = None

    @contextlib.contextmanager
    def watched(self, activity: str):
        """Time every call into the model inside the block under ``activity`` ("its dry step
        before epoch 1"): each call starts the watchdog's clock, its return stops it.

        Why per call and not the whole block: between calls a rank may wait in a collective
        for a slower peer, for as long as the peer's share takes, which is no sign of a hang;
        inside the model no rank waits on another. Training steps are not watched here: their
        phases already say which step of which epoch a rank is in (``PhaseTimer``)."""
        previous, self._activity = self._activity, activity
        try:
            yield
        finally:
            self._activity = previous

    def __call__(self, model: Callable[..., Any], graph: Any, x: Any, rows: int) -> torch.Tensor:
        with self.blame("forward pass"):
            logits = model(graph, x)
        return self.check(logits, rows, _device(x))

    def pairs(self, model: Callable[..., Any], graph: Any, x: Any, pairs: torch.Tensor) -> torch.Tensor:
        """One score per (src, dst) pair of a link batch."""
        with self.blame("forward pass"):
            scores = model(graph, x, pairs)
        count = pairs.shape[1]
        if not isinstance(scores, torch.Tensor) or scores.shape not in ((count,), (count, 1)):
            raise PluginError(
                f"{self.origin}: forward returned {_what(scores)} for {count} pairs; a link model "
                f"returns one score per pair, shape [{count}]."
            )
        self._kind(scores, "forward", "scores", pairs.device)
        return scores.reshape(-1)

    def edges(
        self, model: Callable[..., Any], graph: Any, x: Any, pairs: torch.Tensor, features: torch.Tensor | None = None
    ) -> torch.Tensor:
        """A row of the target's columns per (src, dst) pair of an edge task's batch; ``features``
        (the scored edges' own, where their type has some) go to the model as a fourth argument."""
        with self.blame("forward pass"):
            out = model(graph, x, pairs) if features is None else model(graph, x, pairs, features)
        count = pairs.shape[1]
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (count, self.num_classes):
            raise PluginError(
                f"{self.origin}: forward returned {_what(out)} for {count} edges; an edge model returns a row per "
                f"edge with a column per class, label or value, shape [{count}, {self.num_classes}]."
            )
        self._kind(out, "forward", "outputs", pairs.device)
        return out

    def layer(self, model: Any, index: int, graph: Any, x: Any, rows: int, last: bool = False) -> torch.Tensor:
        """Layer ``index``'s output for the ``rows`` output nodes of its one-hop ``graph`` (the
        first rows of what ``layer_forward`` returns); ``last``: it must be a column per class."""
        method = f"layer_forward({index})"
        with self.blame(method):
            out = model.layer_forward(index, graph, x)
        shape = list(out.shape) if isinstance(out, torch.Tensor) else None
        if shape is None or len(shape) != 2 or shape[0] < rows or (last and shape[1] != self.num_classes):
            columns = (
                f"{self.num_classes} columns (one per class: it is the last layer)"
                if last
                else "one column per feature"
            )
            if shape is not None and len(shape) == 2 and shape[0] < rows:
                got = f"{shape[0]} rows for a batch of {rows} outputs"
            else:
                got = _what(out)
            raise PluginError(
                f"{self.origin}: {method} returned {got}; expected a 2-D tensor with one row per "
                f"output node ({rows}), or one per input node with the output nodes first "
                f"(gnnbridge keeps the first {rows}), and {columns}."
            )
        self._kind(out, method, "outputs", _device(x))
        return out[:rows]

    @contextlib.contextmanager
    def blame(self, what: str):
        """The model's ``what`` (its forward pass, a layer): a failure is one line naming the model;
        inside :meth:`watched`, the call is timed."""
        timed = self.tell is not None and self._activity is not None
        if timed:
            self.tell(f"{self._activity}, in the {what} of {self.origin}")
        try:
            with blame(self.origin, what):
                yield
        finally:
            if timed:
                self.tell(None)

    def check(self, logits: Any, rows: int, device: torch.device | None = None) -> torch.Tensor:
        """``logits``' first ``rows`` rows, once they are what ``forward`` must return."""
        shape = list(logits.shape) if isinstance(logits, torch.Tensor) else None
        too_few = shape is not None and len(shape) == 2 and (shape[0] != rows if self.per_graph else shape[0] < rows)
        if shape is None or len(shape) != 2 or too_few or shape[1] != self.num_classes:
            rows_are = (
                "a row per graph (pool the node states per graph)" if self.per_graph else "a row per seed, seeds first"
            )
            raise PluginError(
                f"{self.origin}: forward returned {_what(logits)}; expected logits of shape "
                f"[{rows}, {self.num_classes}] ({rows_are}; a column per class)."
            )
        self._kind(logits, "forward", "logits", device)
        return logits[:rows]

    def finite(self, out: torch.Tensor, method: str) -> None:
        """One line when ``out`` holds NaN or infinity (a host sync: call it on a dry step, not per batch)."""
        if not bool(torch.isfinite(out).all()):
            raise PluginError(
                f"{self.origin}: {method} returned NaN or infinite values on a small batch before "
                "training started (the features are finite, no optimizer step was taken), so neither "
                "the learning rate nor the data is the cause; fix the model (a division by zero, a log "
                "of 0, uninitialised torch.empty weights)."
            )

    def _kind(self, out: torch.Tensor, method: str, what: str, device: torch.device | None) -> None:
        """Floating point, on the batch's device: what the loss and the next layer need."""
        if not out.is_floating_point():
            raise PluginError(
                f"{self.origin}: {method} returned {str(out.dtype).replace('torch.', '')} {what}; "
                f"expected floating-point {what} (return a float layer's output, not class ids or "
                "counts)."
            )
        if device is not None and out.device != device:
            raise PluginError(
                f"{self.origin}: {method} returned {what} on {out.device}, but the batch is on "
                f"{device}; compute on the input's device (create tensors with device=x.device, "
                "register them as buffers, never call .cpu() or .cuda() in the model)."
            )


def _device(x: Any) -> torch.device | None:
    """The device a batch's input sits on (a tensor, ``IndexedRows``' ids, or a dict of them)."""
    if isinstance(x, dict):
        x = next(iter(x.values()), None)
    x = getattr(x, "ids", x)
    return x.device if isinstance(x, torch.Tensor) else None


def _what(out: Any) -> str:
    return f"shape {list(out.shape)}" if isinstance(out, torch.Tensor) else f"a {type(out).__name__}"


def _spec_text(spec: ModelSpec) -> str:
    options = f", model.options={spec.options}" if spec.options else ""
    return f"model.hidden={spec.hidden}, model.layers={spec.layers}{options}"


def _line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else "no message"
