"""Training: the DDP loop (:mod:`.trainer`), exact evaluation across ranks (:mod:`.evaluation`,
:mod:`.metrics`), checkpoints (:mod:`.checkpoint`) and what they carry besides the weights
(:mod:`.state`). Knows neither library: it drives the contracts.

May import: ``errors``, ``records``, ``contracts``, ``runtime``, ``sampling``, ``models``.
"""
