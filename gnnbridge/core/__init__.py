"""Backend-neutral core, in layers. A layer imports only the layers below it, never one beside or
above it, and nothing in core imports ``torch_geometric``, ``dgl``, ``gnnbridge.backends``,
``gnnbridge.plugins``, ``gnnbridge.cli`` or ``gnnbridge.testing`` (``tests/core/test_layers.py``
enforces both)::

    app/        resolve -> preflight -> run folder -> launch -> results; evaluate, predict
    inference/  a trained model scored without an optimizer, DDP or loggers (evaluate, predict)
    training/   a run's parts, the DDP loop, evaluators, metrics, checkpoints, training state
    runtime/    launching on torch.distributed.elastic, rank setup, watchdog, node-shared data
    sampling/   seed sharding, the core neighbour sampler, sampler adapters
    models/     model parts core owns for every backend (GIN's MLPs, GCN normalisation)
    contracts/  ABCs, hook specs, plugin manager and registries, config
    records/    graph data, collections, batch records
    errors.py   the error types every layer raises
    compiled.py calling numba kernels so that signals still stop a run
    files.py    writing in a run folder: each file replaced whole, never through a link

``runtime``, ``sampling`` and ``models`` stand side by side on ``contracts``; ``files`` stands
beside ``records``, on ``compiled``. ``interfaces.py``
re-exports what plugins import and is imported by nothing in core.
"""
