"""Each key's valid values, declared once beside its field, for both checks that read them.

A field of the schema declares its bound as metadata (``hidden: int = bounded(64, integer(ge=1))``).
:func:`check_fields`, called by every section's ``__post_init__``, refuses a value outside it in
one line (the key, the value, what is valid, a valid example); :meth:`Bound.schema` writes the
same bound as JSON Schema keywords for ``gnnbridge config schema`` (:mod:`.help`). A test builds a
value just outside every declared bound and one on its edge, and asserts that the schema and
loading a config agree on each, so the two cannot drift apart.

What a bound cannot say stays code in the section's ``__post_init__``, with a comment saying so:
rules between keys (a fanout per layer, warm-up shorter than training, the keys only some modes
read) and names known only at run time (the models, samplers and loggers plugins register).

Hand-written rather than pydantic's ``Field(ge=...)``: the sections are plain dataclasses that
must not need pydantic to load (only ``config schema`` imports it), and the refusals are the
package's one-line messages, not pydantic's reports.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from gnnbridge.core.config.values import MAX_INT, show
from gnnbridge.core.errors import ConfigError, did_you_mean

BOUND = "gnnbridge.bound"  # the key of a field's metadata that holds its Bound


@dataclass(frozen=True)
class Bound:
    """The values one key (or each item or value of it) may take. A key of several shapes (an
    int or a list of them, a size as bytes or text) sets the parts of each; a value is checked
    against the part its type selects, and refused when no part takes its type."""

    integer: bool = False  # a number must be an int (JSON Schema "integer")
    ge: float | None = None  # number >= ge
    gt: float | None = None  # number > gt
    le: float | None = None  # number <= le
    lt: float | None = None  # number < lt
    choices: tuple = ()  # text: one of these ...
    # ... or text this regex matches, written ^...$ for JSON Schema (ECMA 262: $ is the end of the
    # text) and matched whole here (re.fullmatch: "val_hits@5\n" is refused by both)
    pattern: str | None = None
    form: str = ""  # the pattern's text as a user reads it: "val_hits@K"
    max_length: int | None = None  # text: at most this many characters
    nonblank: bool = False  # text: not empty or only spaces
    also: tuple = ()  # values valid besides the above, not listed among the choices ("", -1)
    items: Bound | None = None  # a list: each item's bound
    min_items: int = 0
    unique: bool = False  # a list: no item twice
    values: Bound | None = None  # a mapping: each value's bound
    what: str = ""  # a valid value, as a noun: "an optimizer" ("supported" when empty)
    note: str = ""  # what special values mean: "0 turns it off", "-1 for all neighbours"
    example: str = ""  # a valid value as --set writes it (bounded() fills in the default)

    @property
    def numeric(self) -> bool:
        return self.integer or any(v is not None for v in (self.ge, self.gt, self.le, self.lt))

    @property
    def text(self) -> bool:
        return bool(self.choices) or self.pattern is not None or self.nonblank

    # ------------------------------------------------------------------ the run-time check

    def check(self, key: str, value: Any) -> None:
        """Raise :class:`ConfigError` in one line unless ``value`` is within this bound."""
        if any(type(value) is type(a) and value == a for a in self.also):
            return
        if isinstance(value, list) and self.items is not None:
            return self._check_list(key, value)
        if isinstance(value, dict) and self.values is not None:
            for name, item in value.items():
                self.values.check(f"{key}.{name}", item)
            return
        if isinstance(value, str) and self.text:
            return self._check_text(key, value)
        if _is_number(value, self.integer) and self.numeric:
            if not self._in_range(value):
                raise ConfigError(f"{key}={show(value)} is out of range; expected {self.describe(key)}{self._eg(key)}")
            return
        raise ConfigError(
            f"{key}={show(value)} is not {self.what or 'valid'}; expected {self.describe(key)}{self._eg(key)}"
        )

    def _in_range(self, x) -> bool:
        # Written as what holds, so NaN (for which every comparison is False) is out of range.
        # An int fits in 64 bits, as coerce asks of every int key (an item of a mapping included).
        return (
            (not self.integer or -MAX_INT <= x <= MAX_INT)
            and (self.ge is None or x >= self.ge)
            and (self.gt is None or x > self.gt)
            and (self.le is None or x <= self.le)
            and (self.lt is None or x < self.lt)
        )

    def _check_text(self, key: str, value: str) -> None:
        if self.nonblank and not value.strip():
            raise ConfigError(f"{key} is empty; expected {self.what}{self._eg(key)}")
        if not self.choices and self.pattern is None:
            return
        if value in self.choices or (self.pattern is not None and re.fullmatch(self.pattern, value) is not None):
            if self.max_length is None or len(value) <= self.max_length:
                return
        if self.choices:
            shown = ", ".join([*self.choices, *([self.form] if self.form else [])])
            raise ConfigError(
                f"{key}={show(value)} is not {self.what or 'supported'}{did_you_mean(value[:100], self.choices)}; "
                f"choose one of: {shown}{self._note()}."
            )
        raise ConfigError(
            f"{key}={show(value)} is not {self.what or 'valid'}; expected {self.describe(key)}{self._eg(key)}"
        )

    def _check_list(self, key: str, value: list) -> None:
        items = self.items
        assert items is not None
        if len(value) < self.min_items:
            least = "one item" if self.min_items == 1 else f"{self.min_items} items"
            raise ConfigError(f"{key}={show(value)} is empty; give at least {least}{self._eg(key)}")
        for item in value:
            try:
                items.check(key, item)
            except ConfigError:
                raise ConfigError(
                    f"{key}={show(value)} has {show(item)}; expected each item to be {items.describe(key)}"
                    f"{self._eg(key)}"
                ) from None
        if self.unique:  # the items passed their bound: ints or text, so a set finds a repeat in one pass
            seen: set = set()
            for item in value:
                if item in seen:
                    raise ConfigError(f"{key}={show(value)} repeats {show(item)}; give each once{self._eg(key)}")
                seen.add(item)

    # ------------------------------------------------------------------ what a message says

    def describe(self, key: str) -> str:
        """What is valid, in words, as a refusal and the configuration reference say it: "a positive
        integer", "0 <= dropout < 1", "one of: a, b" (``key``: the dotted key it is the bound of)."""
        parts = []
        if self.numeric:
            parts.append(self._range(key.rsplit(".", 1)[-1].split("[")[0]))
        if self.choices:
            parts.append(f"one of: {', '.join([*self.choices, *([self.form] if self.form else [])])}")
        elif self.form:
            parts.append(self.form)
        elif self.nonblank:
            parts.append(self.what)
        if self.items is not None:
            distinct = "distinct " if self.unique else ""
            parts.append(f"a list of {distinct}items, each {self.items.describe(key)}")
        if self.values is not None:
            parts.append(f"a mapping to {self.values.describe(key)}")
        return " or ".join(parts) + self._note()

    def _range(self, name: str) -> str:
        also = "".join(f" or {a}" for a in self.also if not isinstance(a, str))
        if self.integer:
            low = self.ge if self.gt is None else self.gt + 1
            high = self.le if self.lt is None else self.lt - 1
            if low is not None and high is not None:
                return f"an integer from {low} to {high}{also}"
            if low == 1:
                return f"a positive integer{also}"
            if low is not None:
                return f"an integer >= {low}{also}"
            return f"an integer <= {high}{also}" if high is not None else f"an integer{also}"
        low = f"{self.ge} <= " if self.ge is not None else f"{self.gt} < " if self.gt is not None else ""
        high = f" <= {self.le}" if self.le is not None else f" < {self.lt}" if self.lt is not None else ""
        if low and not high:  # lr > 0 reads better than 0 < lr
            low, high = "", f" >= {self.ge}" if self.ge is not None else f" > {self.gt}"
        return f"{low}{name}{high}{also}" if low or high else f"a number{also}"

    def _note(self) -> str:
        return f" ({self.note})" if self.note else ""

    def _eg(self, key: str) -> str:
        return f", e.g. {key}={self.example}." if self.example else "."

    # ------------------------------------------------------------------ the JSON Schema

    def schema(self) -> dict:
        """This bound as JSON Schema (draft 2020-12), types included: what an editor checks."""
        branches: list[dict] = []
        if self.numeric:
            number: dict = {"type": "integer" if self.integer else "number"}
            for keyword, bound in (
                ("minimum", self.ge),
                ("exclusiveMinimum", self.gt),
                ("maximum", self.le),
                ("exclusiveMaximum", self.lt),
            ):
                if bound is not None:
                    number[keyword] = bound
            if self.integer:  # what coerce refuses of every int: it must fit in 64 bits
                number.setdefault("minimum", -MAX_INT)
                number.setdefault("maximum", MAX_INT)
                number["minimum"] = max(number["minimum"], -MAX_INT)
                number["maximum"] = min(number["maximum"], MAX_INT)
            branches.append(number)
        if self.choices:
            branches.append({"enum": list(self.choices)})
        if self.pattern is not None:
            text = {"type": "string", "pattern": self.pattern}
            if self.max_length is not None:
                text["maxLength"] = self.max_length
            branches.append(text)
        elif self.nonblank:
            branches.append({"type": "string", "pattern": r"\S"})
        if self.items is not None:
            array: dict = {"type": "array", "items": self.items.schema()}
            if self.min_items:
                array["minItems"] = self.min_items
            if self.unique:
                array["uniqueItems"] = True
            branches.append(array)
        if self.values is not None:
            branches.append({"type": "object", "additionalProperties": self.values.schema()})
        if self.also:
            branches.append({"enum": list(self.also)})
        return branches[0] if len(branches) == 1 else {"anyOf": branches}


def _is_number(value: Any, integer: bool) -> bool:
    if isinstance(value, bool):
        return False
    return type(value) is int if integer else isinstance(value, (int, float))


# ---------------------------------------------------------------------- declaring and checking


def integer(ge: int | None = None, le: int | None = None, **kwargs) -> Bound:
    return Bound(integer=True, ge=ge, le=le, **kwargs)


def number(**kwargs) -> Bound:
    return Bound(**kwargs)


def one_of(choices: tuple, what: str = "", **kwargs) -> Bound:
    return Bound(choices=tuple(choices), what=what, **kwargs)


def list_of(item: Bound, **kwargs) -> Bound:
    return Bound(items=item, **kwargs)


def bounded(default: Any, bound: Bound) -> Any:
    """A dataclass field with ``default`` whose values ``bound`` declares; the example a refusal
    shows is the default unless the bound names one."""
    if not bound.example:
        bound = dataclasses.replace(bound, example=as_set(default))
    metadata = {BOUND: bound}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def as_set(value: Any) -> str:
    """``value`` as ``--set KEY=VALUE`` writes it: ``[25,10]``, ``0.01``, ``sgd``."""
    if isinstance(value, list):
        return "[" + ",".join(as_set(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {as_set(v)}" for k, v in value.items()) + "}"
    return str(value)


def bound_of(field: dataclasses.Field) -> Bound | None:
    return field.metadata.get(BOUND)


def check_fields(section: Any, prefix: str) -> None:
    """Check every field of the dataclass ``section`` that declares a bound (``prefix``: its
    dotted place, ``"train."``; ``""`` at the top level), in the order they are declared."""
    for field in dataclasses.fields(section):
        bound = bound_of(field)
        if bound is not None:
            bound.check(f"{prefix}{field.name}", getattr(section, field.name))
