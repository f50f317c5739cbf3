"""gnnbridge: train one GNN experiment under DDP on PyG or DGL, on one CPU or many GPUs.

import gnnbridge
results = gnnbridge.run("sage-synthetic", backend="dgl", nproc=2)
print(results["metrics"]["test_acc"])
"""

from gnnbridge.core import plugins as _plugins
from gnnbridge.core.contracts.hookspecs import hookimpl
from gnnbridge.plugins import BUILTIN_PLUGINS, DEFAULT_BACKEND

# Core names no plugin and no backend: the package, which sits above it, hands them over.
_plugins.set_defaults(BUILTIN_PLUGINS, DEFAULT_BACKEND)

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "compare",
    "evaluate",
    "export",
    "hookimpl",
    "load",
    "plot",
    "port",
    "predict",
    "resolve_config",
    "run",
]


def run(experiment=None, **kwargs):
    """Train an experiment and return its results; see :func:`gnnbridge.core.app.train.run`."""
    from gnnbridge.core.app.train import run as _run

    return _run(experiment, **kwargs)


def resolve_config(experiment=None, **kwargs):
    """The validated :class:`ExperimentConfig` a run would use; see
    :func:`gnnbridge.core.app.resolve.resolve_config`."""
    from gnnbridge.core.app.resolve import resolve_config as _resolve

    return _resolve(experiment, **kwargs)


def evaluate(target, **kwargs):
    """Metrics of a run folder's (or a checkpoint file's) model; see :func:`gnnbridge.core.app.inference.evaluate`."""
    from gnnbridge.core.app.inference import evaluate as _evaluate

    return _evaluate(target, **kwargs)


def predict(target, out=None, **kwargs):
    """Class scores for every node or graph: written to ``out`` (.npz), or with no ``out``
    returned as ``{name: numpy array}``; see :func:`gnnbridge.core.app.inference.predict`."""
    from gnnbridge.core.app.inference import predict as _predict

    return _predict(target, out, **kwargs)


def load(target, **kwargs):
    """The trained model of a run folder (or checkpoint file), in eval mode; see
    :func:`gnnbridge.core.app.inference.load`. A ``.safetensors`` file that ``gnnbridge export``
    wrote loads as its plain-torch program (:func:`gnnbridge.core.export.load`)."""
    if str(target).endswith(".safetensors"):
        from gnnbridge.core.export import load as _load_file

        return _load_file(target, **kwargs)
    from gnnbridge.core.app.inference import load as _load

    return _load(target, **kwargs)


def export(run, format, out, **kwargs):
    """Write a run's model as ONNX, torch.export or safetensors; see :func:`gnnbridge.core.app.export.export`."""
    from gnnbridge.core.app.export import export as _export

    return _export(run, format, out, **kwargs)


def port(run, to, out, **kwargs):
    """Move a trained run to the other library as a new run folder; see :func:`gnnbridge.core.app.port.port`."""
    from gnnbridge.core.app.port import port as _port

    return _port(run, to, out, **kwargs)


def compare(experiment=None, *, same_batches: bool = False, **kwargs):
    """One experiment on several libraries: side by side, or (``same_batches``) on identical
    batches and weights; see :mod:`gnnbridge.core.app.compare`."""
    from gnnbridge.core.app import compare as _compare

    return (_compare.same_batches if same_batches else _compare.compare)(experiment, **kwargs)


def plot(runs, out):
    """Draw several runs' loss and validation curves into ``out`` (.png); see :mod:`gnnbridge.core.app.plots`."""
    from gnnbridge.core.app.plots import plot as _plot

    return _plot(list(runs), out)
