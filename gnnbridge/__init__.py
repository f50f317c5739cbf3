"""gnnbridge: train one GNN experiment under DDP on PyG or DGL, on one CPU or many GPUs.

    import gnnbridge
    results = gnnbridge.run("sage-synthetic", backend="dgl", nproc=2)
    print(results["metrics"]["test_acc"])
"""
from gnnbridge.core.hookspecs import hookimpl

__version__ = "0.1.0"

__all__ = ["__version__", "hookimpl", "run", "resolve_config"]


def run(experiment=None, **kwargs):
    """Train an experiment and return its results; see :func:`gnnbridge.core.runner.run`."""
    from gnnbridge.core.runner import run as _run

    return _run(experiment, **kwargs)


def resolve_config(experiment=None, **kwargs):
    """The validated :class:`ExperimentConfig` a run would use; see :func:`gnnbridge.core.runner.resolve_config`."""
    from gnnbridge.core.runner import resolve_config as _resolve

    return _resolve(experiment, **kwargs)
