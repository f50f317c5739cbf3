"""Contracts: what a backend, sampler, model or plugin must answer, and the validated config.

The ABCs (:mod:`.interfaces`), the hook specs and plugin manager with its registries
(:mod:`.hookspecs`, :mod:`.plugins`) and the experiment config (:mod:`.config`). No
implementations live here: what a backend reuses lives in ``sampling`` and ``models``.

May import: ``errors``, ``records``.
"""
