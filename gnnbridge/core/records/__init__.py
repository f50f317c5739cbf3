"""Records: the data that crosses every interface, as dataclasses with checked invariants.

A graph (:mod:`.data`), a collection of small graphs (:mod:`.collection`) and the batches a
sampler hands the trainer (:mod:`.batches`). Library-neutral: tensors and plain values only.
The dataset file format (:mod:`.formats`) and a prepared folder opened memory-mapped
(:mod:`.folder`) live here too: they only read files into records.

May import: ``gnnbridge.core.errors`` and ``gnnbridge.core.environ``. Nothing else of gnnbridge.
"""
