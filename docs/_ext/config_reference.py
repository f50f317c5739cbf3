"""The ``config-reference`` directive: every experiment key, its default, its valid values and its
one-line help.

It reads the schema itself at build time, so the table cannot drift from the code: the keys and
defaults come from the dataclass tree (``ExperimentConfig`` and its sections), the valid values
from the bound each field declares (``gnnbridge/core/config/bounds.py``: the same bound loading
checks and ``gnnbridge config schema`` writes) or from its Enum, the help from the dict of dotted
key -> one line that ``gnnbridge config show`` prints as comments (``KEY_HELP``).
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
import typing

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


def _valid(key: str, field: dataclasses.Field, hint) -> str:
    """The field's valid values in words: its declared bound's, or its Enum's members; and, for a
    key only some modes read, which (``READ_ONLY_BY``: set under another mode, it is refused)."""
    from gnnbridge.core.config.bounds import bound_of
    from gnnbridge.core.config.schema import READ_ONLY_BY

    bound = bound_of(field)
    if bound is not None:
        text = bound.describe(key)
    elif isinstance(hint, type) and issubclass(hint, enum.Enum):
        text = "one of: " + ", ".join(m.value for m in hint)
    else:
        text = ""
    if key in READ_ONLY_BY:
        mode_key, modes = READ_ONLY_BY[key]
        text = f"{text}; only with {mode_key}={' or '.join(modes)}".lstrip("; ")
    return text


def schema_rows(cls: type, prefix: str = "") -> list[tuple[str, bool, object, str]]:
    """(dotted key, is a section, declared default, valid values) for every field of ``cls``,
    depth first."""
    rows = []
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        key = prefix + field.name
        factory = field.default_factory
        if isinstance(factory, type) and dataclasses.is_dataclass(factory):
            rows.append((key, True, None, ""))
            rows.extend(schema_rows(factory, key + "."))
        else:
            rows.append((key, False, _default(field), _valid(key, field, hints[field.name])))
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
        keys = {key for key, _, _, _ in rows}
        for key in sorted(keys - helps.keys()):
            logger.warning(
                "config key %r has no help line in %s", key, self.options["help"], location=self.get_location()
            )
        for key in sorted(helps.keys() - keys):
            logger.warning("help line for %r, which the schema does not have", key, location=self.get_location())

        table = nodes.table(classes=["config-reference"])
        group = nodes.tgroup(cols=4)
        table += group
        for width in (24, 14, 28, 34):
            group += nodes.colspec(colwidth=width)
        head = nodes.thead()
        head += _row([nodes.paragraph(text=t) for t in ("key", "default", "valid values", "what it is")])
        group += head
        body = nodes.tbody()
        for key, section, default, valid in rows:
            name = nodes.paragraph()
            name += nodes.strong(text=key) if section else nodes.literal(text=key)
            value = nodes.paragraph()
            if not section:
                value += nodes.literal(text=_flow(default))
            body += _row([name, value, nodes.paragraph(text=valid), nodes.paragraph(text=helps.get(key, ""))])
        group += body
        return [table]


def setup(app):
    app.add_directive("config-reference", ConfigReference)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
