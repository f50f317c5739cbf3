"""Inference: a trained model scored or run over every item without an optimizer, a DDP wrapper
or loggers (:mod:`.scorer`), what ``gnnbridge evaluate`` and ``predict`` run. It uses the parts
a training run is assembled from and the same final evaluator, so its numbers are training's.

May import: every layer below it (``training`` and what it stands on).
"""
