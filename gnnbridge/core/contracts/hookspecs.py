"""The plugin contract: every hook gnnbridge calls, with when and what it expects.

Plugins (built-in or from any installed package exposing the ``gnnbridge`` entry-point group)
implement hooks with ``@gnnbridge.hookimpl``. Registration hooks receive a ``register``
callback: core owns validation, de-duplication and error messages, so a plugin stays short::

    from gnnbridge import hookimpl

    @hookimpl
    def register_datasets(register):
        register("my-graph", load_my_graph, "My lab's citation graph")
"""

from __future__ import annotations

import pluggy

PROJECT = "gnnbridge"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_backends(register):
    """Called once when plugins load. Call ``register(backend)`` with a ``Backend`` instance."""


@hookspec
def register_datasets(register):
    """Called once when plugins load. Call ``register(name, loader, description)``.

    ``loader(config: LoaderConfig, seed: int)`` returns a ``GraphData`` (node tasks) or a
    ``GraphCollection`` (graph tasks). ``config`` is the run's dataset section with, declared,
    ``config.label_form``: the form the run reads labels in (:mod:`gnnbridge.core.contracts.loading`).
    It runs once, in the launching process; it must validate its inputs and raise ``DataError`` /
    ``ConfigError`` with one line.
    """


@hookspec
def register_dataset_sources(register):
    """Called once when plugins load. Call ``register(source)`` with a
    :class:`~gnnbridge.core.contracts.sources.DatasetSource`: a kind of text a user gives for a
    dataset (``--dataset``, ``gnnbridge prepare SOURCE``), the config section a run reads it
    through, and how ``prepare`` writes it as a folder. Sources are asked in registration order,
    catch-alls (``fallback=True``) last; the first whose ``matches(text)`` is true takes it.
    """


@hookspec
def register_graph_readers(register):
    """Called once when plugins load. Call ``register(name, read, description)``.

    ``read(obj, reading)`` turns a graph a user holds in memory (``gnnbridge.run(dataset=obj)``:
    a PyG ``Data``, a ``DGLGraph``, ...) into the dataset format's arrays as ``reading`` (a
    :class:`~gnnbridge.core.records.reading.Reading`) says: labels in its form, an edge task's
    edge labels, node labels only where the task reads them, the object's own splits or none. It
    returns ``{name: numpy array}`` with the ``.npz``'s names (``x``, ``edge_index``, ``y``,
    ``train_idx``, ...; ``node_ptr`` for a collection; typed keys such as ``x__paper`` for a
    heterogeneous graph), or ``None`` when ``obj`` is not of a kind it reads. Core checks the
    arrays as it checks a file's; a reader written as ``read(obj)`` is still called so, and core
    reads what it returns in the run's form. A reader must not import its library to answer
    ``None``: a user holding the library's object
    has imported it already.
    """


@hookspec
def register_dataset_libraries(register):
    """Called once when plugins load. Call ``register(prefix, open, description)``.

    A dataset named ``PREFIX:CLASS`` (``pyg:Planetoid``) is opened by ``open(class_name, config:
    DatasetConfig, seed)``, which returns a graph object that a graph reader reads (the
    library's own dataset object); ``dataset.options`` are the class's keyword arguments.
    """


@hookspec
def register_experiments(register):
    """Called once when plugins load. Call ``register(name, config_dict, description)``.

    ``config_dict`` is a partial config (same keys as a YAML experiment file).
    """


@hookspec
def register_models(register):
    """Called once when plugins load. Call ``register(name, build, tasks=("node",), description="")``.

    ``build`` makes the ``torch.nn.Module``: one callable for every backend (a model that needs no
    message passing, such as an MLP, or one written against the neutral batch), or a mapping
    ``{backend name: callable}`` for models written with one library's layers. It is called as
    ``build(in_dim, out_dim, **kw)``; ``kw`` holds those of ``hidden``, ``layers``, ``dropout``,
    ``aggr``, ``heads``, ``pooling``, ``spec`` and ``data`` that its signature names, plus
    ``model.options``. See :mod:`gnnbridge.core.models.build` for the forward contract.
    """


@hookspec
def register_samplers(register):
    """Called once when plugins load. Call ``register(name, build, description="")``.

    ``build(store, fanouts)`` is called on every rank. With one callable for every backend it
    returns an object whose ``sample(seeds, generator)`` gives a core ``SampledSubgraph`` (the
    backend turns it into its native batch); with ``{backend name: callable}`` it may return the
    library's own sampler (a DGL ``BlockSampler``) or a full :class:`Sampler`.
    """


@hookspec
def register_loggers(register):
    """Called once when plugins load. Call ``register(name, open, description="")``.

    ``open(run_dir: Path, config: ExperimentConfig)`` is called on rank 0 when a run with
    ``log.to`` naming it starts (or resumes), and returns an object with ``log(step: int,
    values: dict[str, float])`` (once per epoch, ``step`` the epoch counted from 1; at the end
    the final metrics under ``final/``; returning ``False`` says the epoch was not taken, and a
    resume sends it again) and ``close()``. Optional: ``checkpoint_saved(path: Path, step:
    int)``, after each checkpoint written at the end of an epoch, and ``run_finished(run_dir:
    Path)``, once ``results.json`` and ``curves.png`` are written (``close()`` follows; without
    ``run_finished`` before it, the run failed or was stopped). ``open.requires`` may name a
    module it needs, so a missing one is reported before the run starts (``open.extra``: the
    gnnbridge extra that installs it).
    """


@hookspec
def register_tasks(register):
    """Called once when plugins load. Call ``register(obj)`` with a task family or a target.

    A task family (the config's ``task``) is an instance of a subclass of one of the built-in
    families, ``gnnbridge.core.interfaces.NodeFamily``, ``GraphFamily``, ``LinkFamily`` or
    ``EdgeFamily`` (:class:`~gnnbridge.core.contracts.families.TaskFamily` is the contract): it
    runs as that family's kind and overrides what differs (the record its items and targets come
    from, its checks, sampler, evaluators, ``predict``'s rows). A target (the config's ``target``)
    is an instance of a :class:`~gnnbridge.core.contracts.targets.Target` subclass: what the items
    are predicted as (loss, metrics, monitor direction, ``predict`` arrays). Each is chosen under
    its ``name``. The built-in families (``node``, ``graph``, ``link``, ``edge``) and targets
    (``class``, ``multilabel``, ``regression``) register here too.
    """


@hookspec
def register_commands(cli):
    """Called once when the command line starts, with its ``click.Group``: add subcommands with
    ``@cli.command()``. A name gnnbridge or an earlier plugin already uses is not replaced."""
