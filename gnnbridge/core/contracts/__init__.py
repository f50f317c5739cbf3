"""Contracts: what a backend, sampler, model or plugin must answer.

The ABCs (:mod:`.interfaces`) and the hook specs (:mod:`.hookspecs`: the ``hookimpl`` marker
plugins use, and one typed spec per hook). No implementations live here: the plugin machinery is
``core.plugins``, the experiment config ``core.config``, and what a backend reuses lives in
``sampling`` and ``models``.

May import: ``errors``, ``records``, ``config``.
"""
