"""Backend-neutral core, in layers. A layer imports only the layers below it, never one beside or
above it, and nothing in core imports ``torch_geometric``, ``dgl``, ``gnnbridge.backends``,
``gnnbridge.plugins``, ``gnnbridge.cli`` or ``gnnbridge.testing`` (``tests/test_layers.py``
enforces both)::

    app/        resolve -> preflight -> run folder -> launch -> results; evaluate, predict
    training/   the DDP loop, optimizer and schedule, when to checkpoint, training state
    inference/  a run's parts, evaluators, metrics, checkpoint files; a trained model scored
                without an optimizer, DDP or loggers (evaluate, predict)
    export/     the built-in models as plain torch programs and the files export writes (beside inference/)
    runtime/    launching on torch.distributed.elastic, rank setup, watchdog, node-shared data
    sampling/   seed sharding, the core neighbour sampler, sampler adapters
    models/     model parts core owns for every backend (GIN's MLPs, GCN normalisation, one initialisation)
    plugins/    the plugin manager, its registries and switches (core's machinery, not the built-ins)
    storage/    datasets on disk: file formats, prepare, prepared folders, link caches, partitions
    contracts/  ABCs and hook specs
    tasks/      a heterogeneous source made into a task's record: splits, held-out edges, negatives
    config/     the experiment schema, loading (YAML, --set, guards), help text and JSON Schema
    records/    graph data, collections, batch records
    errors.py   the error types every layer raises
    compiled.py calling numba kernels so that signals still stop a run
    environ.py  the environment variables gnnbridge's processes pass to each other, named once
    host.py     what this machine can still give: free memory and disk
    files.py    writing files safely: replaced whole (never through a link), published without
                overwriting, the run-folder lock

``runtime``, ``sampling`` and ``models`` stand side by side on ``plugins``, which stands on
``storage``, which stands on ``contracts`` and ``tasks`` (side by side); ``files`` and
``config`` stand beside ``records``, on ``compiled``, ``host`` and ``errors``; ``inference``
and ``export`` stand side by side on ``models``; ``training`` stands on ``inference``.
``interfaces.py`` re-exports what plugins import and is imported by nothing in core.
"""
