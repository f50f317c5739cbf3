"""The registry of dataset sources: which kind of source a text the user gave names, asked in one
place (``--dataset``, ``gnnbridge prepare``, ``predict --dataset``), never by a suffix test of
each command's own.

Sources are tried in the order they were registered, the catch-alls (``fallback``: any folder,
any path, any name) after every other, so a plugin's source (``.sqlite``, ``postgresql://``, a
folder of Parquet files) is asked before the built-in ones that would take any path, whichever
plugin loaded first. The built-in kinds (a registered dataset name, an ``.npz`` file, a folder of
``.npy`` arrays, and the table sources) register through ``register_dataset_sources`` like a
third-party plugin's: core names none of them.
"""

from __future__ import annotations

from gnnbridge.core.contracts.sources import DatasetSource
from gnnbridge.core.errors import ConfigError
from gnnbridge.core.plugins.registries import REGISTRIES, Registry


class SourceRegistry(Registry):
    """Dataset sources in the order they are asked."""

    def sources(self, readable: bool = False) -> list[DatasetSource]:
        """Every source, in the order they are tried (``readable``: only those a run reads)."""
        entries = [e.value for e in self._collect().values()]  # registration order
        ordered = [s for s in entries if not s.fallback] + [s for s in entries if s.fallback]
        return [s for s in ordered if s.section is not None] if readable else ordered

    def source_for(self, text: str, readable: bool = False) -> DatasetSource:
        """The first source whose ``matches(text)`` is true (``readable``: of those a run reads,
        for ``--dataset``); a text no source takes is one line listing the kinds."""
        chosen = self.sources(readable)
        for source in chosen:
            if source.matches(text):
                return source
        kinds = "; ".join(s.describe for s in chosen) or "none: no dataset source is installed"
        raise ConfigError(f"No dataset source takes {text!r}; give one of: {kinds}.")

    def section(self, text: str) -> dict:
        """The config's dataset section that reads ``text`` (``--dataset TEXT``)."""
        return self.source_for(text, readable=True).section(text)

    def kinds(self) -> list[dict]:
        """``[{"name", "description", "plugin", "reads", "prepares"}]``, in the order tried."""
        held = self._collect()
        return [
            {
                "name": s.name,
                "description": s.describe,
                "plugin": held[s.name].plugin,
                "reads": s.section is not None,
                "prepares": s.prepare is not None,
            }
            for s in self.sources()
        ]


dataset_sources = SourceRegistry(
    "dataset source",
    "register_dataset_sources",
    "",
    lambda value: isinstance(value, DatasetSource),
    "a gnnbridge.core.interfaces.DatasetSource (name, matches, describe, section, prepare)",
)
REGISTRIES.append(dataset_sources)  # reset with the others when a plugin comes or goes


def source_for(text: str, readable: bool = False) -> DatasetSource:
    """:meth:`SourceRegistry.source_for` of the one registry."""
    return dataset_sources.source_for(text, readable)
