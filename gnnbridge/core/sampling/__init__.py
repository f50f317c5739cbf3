"""Sampling: which seeds each rank trains on (:mod:`.seeds`), the framework-neutral neighbour
sampler (:mod:`.neighbors`), and the samplers a backend assembles from core pieces and its own
converters (:mod:`.adapters`).

May import: ``errors``, ``records``, ``contracts``.
"""
