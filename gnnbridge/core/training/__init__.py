"""Training: a run's parts assembled from its config (:mod:`.assembly`), the DDP loop
(:mod:`.trainer`), the optimizer and learning-rate schedule (:mod:`.optim`), exact evaluation
across ranks (:mod:`.evaluation`, :mod:`.metrics`), when checkpoints are written and the best
weights (:mod:`.checkpointing`), the checkpoint files (:mod:`.checkpoint`) and what they carry
besides the weights (:mod:`.state`). Knows neither library: it drives the contracts.

May import: ``errors``, ``records``, ``contracts``, ``runtime``, ``sampling``, ``models``.
"""
