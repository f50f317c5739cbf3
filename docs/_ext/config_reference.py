"""The ``config-reference`` directive: every experiment key, its default and its one-line help.

It reads the schema itself at build time, so the table cannot drift from the code: the keys and
defaults come from the dataclass tree (``ExperimentConfig`` and its sections), the help from the
dict of dotted key -> one line that ``gnnbridge config show`` prints as comments (``KEY_HELP``).
A key the schema has without a help line, or a help line for a key the schema lacks, is a Sphinx
warning, and ``make docs`` (``-W``) fails on it.

Hand-written because no extension in the stack joins these two sources: autodoc documents a
dataclass's fields but knows nothing of a separate help dict, and rendering the JSON Schema that
``gnnbridge config schema`` prints would take another dependency (a JSON Schema extension) to
draw nested objects, where a user wants one table of dotted keys as ``--set`` spells them. It is
a few dozen lines of docutils. Both locations are options of the directive, so a move of either is a
one-line change in ``docs/config-reference.md``::

    ```{config-reference}
    :schema: gnnbridge.core.config.schema:ExperimentConfig
    :help: gnnbridge.core.config.help:KEY_HELP
    ```
"""

from __future__ import annotations

import dataclasses
import enum
import importlib

import yaml
from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)


def _load(spec: str):
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def _default(field: dataclasses.Field):
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return None
    return value.value if isinstance(value, enum.Enum) else value


def schema_rows(cls: type, prefix: str = "") -> list[tuple[str, bool, object]]:
    """(dotted key, is a section, declared default) for every field of ``cls``, depth first."""
    rows = []
    for field in dataclasses.fields(cls):
        key = prefix + field.name
        factory = field.default_factory
        if isinstance(factory, type) and dataclasses.is_dataclass(factory):
            rows.append((key, True, None))
            rows.extend(schema_rows(factory, key + "."))
        else:
            rows.append((key, False, _default(field)))
    return rows


def _flow(value) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
    return text.removesuffix("...").strip()


def _row(cells: list[nodes.Node]) -> nodes.row:
    row = nodes.row()
    for cell in cells:
        entry = nodes.entry()
        entry += cell
        row += entry
    return row


class ConfigReference(SphinxDirective):
    has_content = False
    option_spec = {"schema": directives.unchanged_required, "help": directives.unchanged_required}

    def run(self) -> list[nodes.Node]:
        schema, helps = _load(self.options["schema"]), _load(self.options["help"])
        rows = schema_rows(schema)
        keys = {key for key, _, _ in rows}
        for key in sorted(keys - helps.keys()):
            logger.warning(
                "config key %r has no help line in %s", key, self.options["help"], location=self.get_location()
            )
        for key in sorted(helps.keys() - keys):
            logger.warning("help line for %r, which the schema does not have", key, location=self.get_location())

        table = nodes.table(classes=["config-reference"])
        group = nodes.tgroup(cols=3)
        table += group
        for width in (30, 20, 50):
            group += nodes.colspec(colwidth=width)
        head = nodes.thead()
        head += _row([nodes.paragraph(text=t) for t in ("key", "default", "what it is")])
        group += head
        body = nodes.tbody()
        for key, section, default in rows:
            name = nodes.paragraph()
            name += nodes.strong(text=key) if section else nodes.literal(text=key)
            value = nodes.paragraph()
            if not section:
                value += nodes.literal(text=_flow(default))
            body += _row([name, value, nodes.paragraph(text=helps.get(key, ""))])
        group += body
        return [table]


def setup(app):
    app.add_directive("config-reference", ConfigReference)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
