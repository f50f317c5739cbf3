"""Models: the parts of a model core owns so every backend computes the same function: GIN with
core-held parameters (:mod:`.gin`) and the graph arithmetic both libraries' layers share
(:mod:`.graphops`: GCN normalisation, per-layer trimming bounds).

May import: ``errors``, ``records``, ``contracts``.
"""
