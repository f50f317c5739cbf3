"""Backend-neutral core, in layers. A layer imports only the layers below it, never one beside or
above it, and nothing in core imports ``torch_geometric``, ``dgl``, ``gnnbridge.backends``,
``gnnbridge.plugins``, ``gnnbridge.cli`` or ``gnnbridge.testing`` (``tests/core/test_layers.py``
enforces both)::

    app/        resolve -> preflight -> run folder -> launch -> results; evaluate, predict
    training/   the DDP loop, evaluators, metrics, checkpoints, training state
    runtime/    launching on torch.distributed.elastic, rank setup, watchdog, node-shared data
    sampling/   seed sharding, the core neighbour sampler, sampler adapters
    models/     model parts core owns for every backend (GIN's MLPs, GCN normalisation)
    plugins/    the plugin manager, its registries and switches (core's machinery, not the built-ins)
    contracts/  ABCs and hook specs
    config/     the experiment schema, loading (YAML, --set, guards), help text and JSON Schema
    records/    graph data, collections, batch records
    errors.py   the error types every layer raises
    compiled.py calling numba kernels so that signals still stop a run
    files.py    writing in a run folder: each file replaced whole, never through a link

``runtime``, ``sampling`` and ``models`` stand side by side on ``plugins``, which stands on
``contracts``; ``files`` and ``config`` stand beside ``records``, on ``compiled`` and
``errors``. ``interfaces.py``
re-exports what plugins import and is imported by nothing in core.
"""
