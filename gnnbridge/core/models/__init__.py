"""Models: the parts of a model core owns so every backend computes the same function: GIN with
core-held parameters (:mod:`.gin`) and the graph arithmetic both libraries' layers share
(:mod:`.graphops`: GCN normalisation, per-layer trimming bounds), the one initialisation of
the built-in models on every backend (:mod:`.init`), and :mod:`.build`: from ``model.arch`` (a
registered name or ``module:Class``) to a module, and calls into it that name the model when it
fails (:mod:`.generated`: the source files a library writes to the temp folder while a model is
built, removed once it is).

May import: ``errors``, ``records``, ``contracts``.
"""
