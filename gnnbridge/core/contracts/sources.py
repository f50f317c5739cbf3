"""A dataset source: one kind of text a user gives for a dataset (``--dataset``, ``prepare``,
``predict --dataset``), and what gnnbridge does with it.

Every command used to tell a folder from an ``.npz`` from a name by its own suffix tests, in
three places that drifted apart. A source says it once: whether a text is one of its kind
(``matches``), the config's dataset section a run reads it through (``section``; ``None``: a run
cannot read it, prepare it first, as tables), and how ``gnnbridge prepare`` writes it as a
prepared folder (``prepare``; ``None``: it needs no prepare). The registry that orders and asks
the sources is :mod:`gnnbridge.core.plugins.sources`; plugins add one with
``register_dataset_sources(register)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gnnbridge.core.errors import ConfigError


@dataclass(frozen=True)
class DatasetSource:
    """One kind of dataset source.

    :param name: the source's registry name (``npz``, ``folder``, ``tables-sqlite``, ...).
    :param matches: ``matches(text) -> bool``: whether ``text`` is a source of this kind; it must
        be cheap and must not raise (a suffix, ``Path.is_dir()``, a URL scheme).
    :param describe: what the user gives, as one phrase for the line listing the kinds
        (``"an .npz file"``).
    :param section: ``section(text) -> dict``, the config's dataset section that reads it
        (``{"name": "npz", "path": text}``); ``None``: a run does not read this kind (prepare it).
    :param prepare: ``prepare(text, out, dtype, progress, **options) -> dict``, prepare's result
        (:func:`gnnbridge.core.storage.prepare.describe` prints it); ``None``: no prepare needed.
    :param options: the prepare options this kind takes beyond ``out``, ``dtype`` and
        ``progress`` (tables: ``label``, ``schema``, ...); another option is refused in one line.
    :param fallback: a catch-all for its shape (any folder, any path, any name): tried after every
        source that is not one, whichever plugin registered it first.
    """

    name: str
    matches: Callable[[str], bool]
    describe: str
    section: Callable[[str], dict] | None = None
    prepare: Callable[..., dict] | None = None
    options: tuple[str, ...] = field(default=())
    fallback: bool = False

    def __post_init__(self):
        if not callable(self.matches):
            raise ConfigError(f"Dataset source '{self.name}': matches must be a callable (text) -> bool.")
        for key in ("section", "prepare"):
            if getattr(self, key) is not None and not callable(getattr(self, key)):
                raise ConfigError(f"Dataset source '{self.name}': {key} must be a callable or None.")
        object.__setattr__(self, "options", tuple(self.options))
