"""Sampling: which seeds each rank trains on (:mod:`.seeds`), the framework-neutral neighbour
sampler (:mod:`.neighbors`), the samplers a backend assembles from core pieces and its own
converters (:mod:`.adapters`), and ``sampler.kind`` to a sampler, a plugin's checked batch by
batch (:mod:`.build`).

May import: ``errors``, ``records``, ``contracts``.
"""
