"""What a config may be at all, checked before anything prints, copies or recurses into it.

An experiment is a few dozen values three levels deep; these bounds refuse only what is not a
config (a YAML alias bomb, a list nested thousands deep, a multi-megabyte file), in one line,
and cost a bounded number of steps whatever they are given. PyYAML has no such limits of its own.
"""

from __future__ import annotations

from typing import Any

import yaml

from gnnbridge.core.errors import ConfigError

MAX_DEPTH = 32
MAX_VALUES = 100_000  # counted with every alias expanded
MAX_TEXT_BYTES = 1_000_000


def check_plain(value: Any, where: str) -> None:
    """Refuse a value nested deeper than :data:`MAX_DEPTH` or holding more than
    :data:`MAX_VALUES` values once shared references (YAML aliases, pickle memo) are expanded.

    Iterative and stopped at the bound, so it costs at most ``MAX_VALUES`` steps whatever it is
    given (a cycle or a billion-laughs value included); everything after it (printing the value
    in a message, copying it, flattening it) may then recurse and expand freely."""
    stack, seen = [(value, 1)], 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise ConfigError(
                f"{where} expands to more than {MAX_VALUES:,} values (a YAML alias bomb or a "
                "self-referencing value?); an experiment holds a few dozen."
            )
        if isinstance(item, (dict, list, tuple, set)):
            if depth > MAX_DEPTH:
                raise ConfigError(
                    f"{where} is nested more than {MAX_DEPTH} levels deep; an experiment has "
                    "sections, keys and at most a short list."
                )
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


def safe_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load`` that refuses, in one line, what is not a config: text over
    :data:`MAX_TEXT_BYTES`, nesting deeper than :data:`MAX_DEPTH` (PyYAML builds nested values
    recursively and would end in a RecursionError) and values that expand past
    :data:`MAX_VALUES` (an alias bomb loads in microseconds but never finishes printing).
    Raises ``yaml.YAMLError`` for text that is not YAML."""
    if len(text) > MAX_TEXT_BYTES:
        raise ConfigError(
            f"{where} is {len(text):,} characters long; an experiment is a few lines (at most {MAX_TEXT_BYTES:,})."
        )
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):  # the parser is a state machine: no recursion
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise ConfigError(
                    f"{where} is nested more than {MAX_DEPTH} levels deep; an experiment has "
                    "sections, keys and at most a short list."
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    data = yaml.safe_load(text)
    check_plain(data, where)
    return data
