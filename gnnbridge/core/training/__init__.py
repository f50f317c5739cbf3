"""Training: the DDP loop (:mod:`.trainer`) over the parts :mod:`gnnbridge.core.inference`
assembles, the optimizer and learning-rate schedule (:mod:`.optim`), when checkpoints are written
and the best weights (:mod:`.checkpointing`), what they carry besides the weights (:mod:`.state`,
:mod:`.midepoch`), the dry step that checks a model's contract first (:mod:`.dry`), sparse tables
(:mod:`.sparse`, :mod:`.shared_tables`) and loggers. Knows neither library, nor any task: the
target's loss and metrics and the parts' evaluators are asked, not branched on.

May import: every layer below it (``inference`` and what it stands on).
"""
