"""Inference: everything that scores a model, below the training loop that uses it. A run's parts
assembled from its config (:mod:`.assembly`: data placed on the device, backend, sampler, model,
target, evaluators; what differs per task family in :mod:`.families`), exact evaluation across
ranks (:mod:`.evaluation`, layer-wise passes in :mod:`.typed_layerwise` and :mod:`.layerstore`,
:mod:`.metrics`), the checkpoint files (:mod:`.checkpoint`), feature placement (:mod:`.placement`)
and step timings (:mod:`.phases`); and a trained model scored without an optimizer, a DDP wrapper
or loggers (:mod:`.scorer`), what ``gnnbridge evaluate`` and ``predict`` run. Training and
inference score with the same code, so their numbers agree by construction.

May import: ``errors``, ``host``, ``records``, ``config``, ``contracts``, ``tasks``, ``storage``,
``plugins``, ``runtime``, ``sampling``, ``models``.
"""
