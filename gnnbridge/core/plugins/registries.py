"""Names to things, one registry per kind (backends, datasets, experiments, models, samplers,
loggers), filled by the plugins' ``register_*`` hooks on first use.

A registration hook receives a ``register`` callback (llm's ``register_models(register)``): the
registry owns de-duplication, validation and the error messages, so a plugin stays three lines.
A plugin that registers something invalid, or a name another plugin holds, is an error naming
the plugin(s): which of two models a config means cannot be guessed.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gnnbridge.core.config import Task
from gnnbridge.core.config.schema import TASK_KINDS, TASK_NAME
from gnnbridge.core.contracts.families import TaskFamily
from gnnbridge.core.contracts.loading import reading_of
from gnnbridge.core.contracts.targets import Target
from gnnbridge.core.errors import ConfigError, DataError, unknown_name
from gnnbridge.core.plugins import manager
from gnnbridge.core.plugins.faults import PluginError, blame, describe, is_plugin_fault, stdout_to_stderr
from gnnbridge.core.plugins.library import drawn_from, named, pin
from gnnbridge.core.plugins.manager import ENV_LOAD, load_plugins, plugin_failed
from gnnbridge.core.records.reading import Reading
from gnnbridge.core.storage.formats import digest, graph_from_arrays


@dataclass
class Entry:
    name: str
    value: Any
    description: str
    plugin: str


class Registry:
    """Names to objects for one kind of thing; errors list what is available."""

    def __init__(
        self,
        kind: str,
        hook: str,
        fix: str = "",
        expect: Callable[[Any], bool] | None = None,
        expected: str = "",
        other: type | None = None,
    ):
        """``expect``: whether a registered value is of the right kind (``expected`` says which).
        ``other``: the type another registry of the same hook takes, left to it here."""
        self.kind = kind
        self.hook = hook
        self.fix = fix
        self.expect, self.expected = expect, expected
        self.other = other
        self._entries: dict[str, Any] | None = None

    def _collect(self) -> dict[str, Any]:
        if self._entries is not None:
            return self._entries
        load_plugins()
        entries: dict[str, Any] = {}
        failed = []
        for impl in getattr(manager.pm.hook, self.hook).get_hookimpls():
            before = {k: list(v) if isinstance(v, list) else v for k, v in entries.items()}
            try:
                with stdout_to_stderr():
                    impl.function(self._register_callback(entries, impl.plugin_name))
            except BaseException as exc:  # noqa: BLE001 - a plugin's bug must not stop the others
                if not is_plugin_fault(exc):
                    raise  # an invalid registration or a taken name: the plugin's author must fix it
                entries.clear()
                entries.update(before)
                failed.append((impl.plugin_name, f"raised in {self.hook}: {describe(exc)}"))
        for name, why in failed:
            plugin_failed(name, why)  # resets every registry: this one is then kept as collected
        self._entries = entries
        return entries

    def _register_callback(self, entries: dict[str, Any], plugin: str) -> Callable[..., None]:
        def register(name: Any, value: Any = None, description: str = "") -> None:
            if value is None and hasattr(name, "name"):  # register(obj) with obj.name / obj.description
                name, value, description = name.name, name, getattr(name, "description", "")
            if self.other is not None and isinstance(value, self.other):
                return  # the other registry of this hook holds it
            self._check_name(name, plugin)
            if name in entries:
                self._taken(name, entries[name].plugin, plugin)
            if self.expect is not None and not self.expect(value):
                raise PluginError(
                    f"Plugin '{plugin}' registered {self.kind} '{name}' as a {type(value).__name__} "
                    f"({repr(value)[:60]}) in {self.hook}; register {self.expected}."
                )
            entries[name] = Entry(name, value, description, plugin)

        return register

    def _check_name(self, name: Any, plugin: str) -> None:
        if not isinstance(name, str) or not name or name != name.strip() or ":" in name:
            raise PluginError(
                f"Plugin '{plugin}' registered a {self.kind} with an invalid name {name!r}; a name is "
                "a non-empty string without spaces around it or ':'."
            )

    def _taken(self, name: str, holder: str, plugin: str, where: str = "") -> None:
        raise PluginError(
            f"{self.kind.capitalize()} '{name}'{where} is registered twice (plugins '{holder}' and '{plugin}'); "
            f"uninstall one or exclude it with {ENV_LOAD}."
        )

    def names(self) -> list[str]:
        return sorted(self._collect())

    def names_from(self, plugin: str) -> list[str]:
        """What ``plugin`` registered here."""
        return sorted({e.name for e in self.entries() if e.plugin == plugin})

    def entries(self) -> list[Entry]:
        return [self._collect()[n] for n in self.names()]

    def get(self, name: str) -> Any:
        entries = self._collect()
        if name not in entries:
            raise unknown_name(self.kind, name, entries, self.fix)
        return entries[name].value

    def origin(self, name: str) -> str:
        """``kind 'name' (plugin 'p')``: how a line names what a plugin registered."""
        entry = self._collect().get(name)
        plugin = entry.plugin if isinstance(entry, Entry) else "?"
        return f"{self.kind} '{name}' (plugin '{plugin}')"

    def reset(self) -> None:
        """Forget collected entries (after registering or unregistering a plugin)."""
        self._entries = None


ANY_BACKEND = "*"  # the key of a component every backend can use


@dataclass
class Component:
    """One registration of a model or sampler: ``build`` for ``backend`` (``ANY_BACKEND``: all)."""

    name: str
    backend: str
    build: Callable[..., Any]
    tasks: tuple[Task, ...]
    description: str
    plugin: str
    heterogeneous: bool = False  # the builder also takes heterogeneous data (and so can train task=link)

    @property
    def origin(self) -> str:
        return f"'{self.name}' (plugin '{self.plugin}')"


class ScopedRegistry(Registry):
    """Names to per-backend builders: models and samplers.

    One name may be registered by several plugins for different backends (a third-party backend
    adds its own ``sage``); a name registered for every backend, or twice for one, is taken.
    ``get(name, backend, task)`` answers in one line which backends or tasks a name serves when
    it does not serve the one asked for.
    """

    def __init__(self, kind: str, hook: str, key: str, fix: str = "", reserved: tuple[str, ...] = ()):
        """``reserved``: names every backend answers itself, listed first among the choices."""
        super().__init__(kind, hook, fix)
        self.key = key
        self.reserved = reserved

    def _register_callback(self, entries: dict[str, Any], plugin: str) -> Callable[..., None]:
        def register(
            name: Any,
            build: Any = None,
            *,
            tasks: Any = (Task.NODE,),
            description: str = "",
            heterogeneous: bool = False,
        ) -> None:
            self._check_name(name, plugin)
            if name in self.reserved:
                raise PluginError(
                    f"Plugin '{plugin}' registered {self.kind} '{name}', a name every backend answers "
                    f"itself ({', '.join(self.reserved)}); choose another."
                )
            for backend, fn in self._builders(name, build, plugin).items():
                for held in entries.get(name, []):
                    if ANY_BACKEND in (backend, held.backend) or backend == held.backend:
                        where = "" if ANY_BACKEND in (backend, held.backend) else f" for backend '{backend}'"
                        self._taken(name, held.plugin, plugin, where)
                comp = Component(
                    name, backend, fn, self._tasks(name, tasks, plugin), str(description), plugin, bool(heterogeneous)
                )
                entries.setdefault(name, []).append(comp)

        return register

    def _builders(self, name: str, build: Any, plugin: str) -> dict[str, Callable]:
        builders = dict(build) if isinstance(build, dict) else {ANY_BACKEND: build}
        bad = [k for k, v in builders.items() if not isinstance(k, str) or not k or not callable(v)]
        if not builders or bad:
            raise PluginError(
                f"Plugin '{plugin}' registered {self.kind} '{name}' with {build!r}; give a callable "
                "(every backend) or a mapping {backend name: callable}."
            )
        return builders

    def _tasks(self, name: str, tasks: Any, plugin: str) -> tuple[Task, ...]:
        values = [tasks] if isinstance(tasks, (str, Task)) else list(tasks or ())
        valid = [t.value for t in Task]
        bad = [t for t in values if getattr(t, "value", t) not in valid]
        if not values or bad:
            raise PluginError(
                f"Plugin '{plugin}' registered {self.kind} '{name}' with tasks={tasks!r}; "
                f"tasks are a list of: {', '.join(valid)}."
            )
        return tuple(Task(getattr(t, "value", t)) for t in values)

    def entries(self) -> list[Component]:
        entries = self._collect()
        return [c for n in sorted(entries) for c in entries[n]]

    def names(self, backend: str | None = None, task: Task | None = None) -> list[str]:
        return sorted(
            {
                c.name
                for c in self.entries()
                if (backend is None or c.backend in (backend, ANY_BACKEND)) and (task is None or task in c.tasks)
            }
        )

    def choices(self, backend: str | None = None, task: Task | None = None) -> list[str]:
        return [*self.reserved, *self.names(backend, task)]

    def get(self, name: str, backend: str | None = None, task: Task | None = None) -> Component:
        """The component ``name`` for ``backend`` and ``task``, or one line saying what to use."""
        comps = self._collect().get(name)
        if not comps:
            raise unknown_name(self.key, name, self.choices(backend, task), self.fix)
        usable = [c for c in comps if backend is None or c.backend in (backend, ANY_BACKEND)]
        if not usable:
            others = ", ".join(sorted(c.backend for c in comps))
            raise ConfigError(
                f"{self.key}={name!r} (plugin '{comps[0].plugin}') is built only for backend "
                f"{others}, not '{backend}'; use --backend {comps[0].backend}, or one of the {self.kind}s "
                f"'{backend}' has: {', '.join(self.choices(backend, task)) or 'none'}."
            )
        comp = usable[0]
        if task is not None and task not in comp.tasks:
            served = ", ".join(t.value for t in comp.tasks)
            choices = self.names(backend, task)
            example = min(choices, key=lambda c: c[0].isupper()) if choices else "..."
            raise ConfigError(
                f"{self.key}={name!r} is a {self.kind} for task={served}, not task={task.value}; use one of: "
                f"{', '.join(choices) or 'none'} (e.g. --set {self.key}={example})."
            )
        return comp


backends = Registry(
    "backend", "register_backends", "Install one with pip install 'gnnbridge[pyg]' or 'gnnbridge[dgl]'."
)


class DatasetRegistry(Registry):
    """Datasets by name, and ``LIBRARY:CLASS`` (``pyg:Planetoid``): one of a library's own dataset
    classes, opened by the plugin that registered the library and read like a graph handed over
    in memory. A library's collection is open-ended, so its classes cannot be listed as names."""

    def get(self, name: str) -> Any:
        if isinstance(name, str) and ":" in name:
            prefix, _, cls = name.partition(":")
            opener = dataset_libraries.get(prefix)
            return lambda config, seed: _library_dataset(opener, prefix, cls, config, seed)
        return super().get(name)

    def origin(self, name: str) -> str:
        if ":" in name:
            return f"dataset '{name}' ({dataset_libraries.origin(name.partition(':')[0])})"
        return super().origin(name)


class GraphReaders(Registry):
    """Graph objects held in memory to the dataset format's arrays: the first reader that knows
    the object's kind reads it."""

    def read(self, obj: Any, where: str, reading: Reading) -> tuple[str, dict]:
        """``(reader name, arrays)``, read as ``reading`` says; an object no reader knows is one
        line saying what is read."""
        for entry in self.entries():
            with blame(self.origin(entry.name), f"read of a {type(obj).__name__}"):
                arrays = entry.value(obj, reading) if _takes_reading(entry.value) else entry.value(obj)
            if arrays is not None:
                return entry.name, arrays
        kinds = "; ".join(e.description for e in self.entries()) or "none: no graph reader is installed"
        raise ConfigError(
            f"{where} is a {type(obj).__module__}.{type(obj).__qualname__}, which no graph reader reads; give a "
            f"dataset name, a .npz path, a prepared folder, or a graph object ({kinds})."
        )


def _takes_reading(read: Callable) -> bool:
    """Whether a graph reader takes ``(obj, reading)``; one written before readings took ``(obj)``."""
    try:
        params = inspect.signature(read).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: called as the contract says now
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)


def _library_dataset(opener: Callable, prefix: str, cls: str, config, seed: int):
    """The record of ``PREFIX:CLASS``: the library opens it and a graph reader reads it, under the
    run's seed; its content is pinned in ``config.digest`` (:mod:`gnnbridge.core.plugins.library`)."""
    name = f"{prefix}:{cls}"
    with drawn_from(seed):
        with blame(dataset_libraries.origin(prefix), f"opening of {name}"):
            obj = opener(cls, config, seed)
        try:
            _, arrays = graph_readers.read(obj, f"dataset '{name}'", reading_of(config))
        except DataError as exc:
            raise named(exc, name) from None
    pin(config, name, digest(arrays), seed)
    return graph_from_arrays(f"dataset '{name}'", arrays, seed, name, reading_of(config))


datasets = DatasetRegistry(
    "dataset",
    "register_datasets",
    "Or pass a file: --dataset PATH.npz, or a library's dataset: --dataset pyg:Planetoid.",
    callable,
    "a loader: a callable (dataset_config, seed) -> GraphData",
)
experiments = Registry(
    "experiment",
    "register_experiments",
    "Or pass a YAML file path.",
    lambda value: isinstance(value, dict),
    "a dict of config sections, e.g. {'model': {'arch': 'sage'}}",
)
models = ScopedRegistry(
    "model",
    "register_models",
    "model.arch",
    "Or give a class by import path, e.g. --set model.arch=my_lab.models:DeepSAGE (gnnbridge models lists them all).",
)
samplers = ScopedRegistry(
    "sampler", "register_samplers", "sampler.kind", "(gnnbridge samplers lists them all).", reserved=("auto", "native")
)
loggers = Registry(
    "logger",
    "register_loggers",
    "(gnnbridge loggers lists them).",
    callable,
    "an opener: a callable (run_dir, config) -> an object with log(step, values) and close()",
)
graph_readers = GraphReaders(
    "graph reader",
    "register_graph_readers",
    "",
    callable,
    "a reader: a callable (obj) -> {array name: numpy array} in the dataset format, or None for another kind",
)
dataset_libraries = Registry(
    "dataset library",
    "register_dataset_libraries",
    "A library's dataset is named LIBRARY:CLASS, e.g. pyg:Planetoid.",
    callable,
    "an opener: a callable (class name, config, seed) -> a graph object a graph reader takes",
)
targets = Registry(
    "target",
    "register_tasks",
    "(gnnbridge targets lists them).",
    lambda value: isinstance(value, Target) and bool(value.losses) and bool(value.monitors),
    "an instance of a gnnbridge.core.interfaces.Target subclass that names its losses and monitors, "
    "or of a task family (a subclass of gnnbridge.core.interfaces.NodeFamily, GraphFamily, LinkFamily or EdgeFamily)",
    other=TaskFamily,
)
families = Registry(
    "task family",
    "register_tasks",
    "(gnnbridge targets lists them).",
    lambda value: isinstance(value, TaskFamily) and isinstance(value.kind, Task) and _family_name(value.name),
    "an instance of a task family named in lower case (letters, digits, - and _) whose kind is a "
    "gnnbridge.core.config.Task (a subclass of "
    "gnnbridge.core.interfaces.NodeFamily, GraphFamily, LinkFamily or EdgeFamily), or of a Target subclass",
    other=Target,
)
REGISTRIES = [  # core.plugins.sources appends the dataset sources' registry
    backends,
    datasets,
    experiments,
    models,
    samplers,
    loggers,
    graph_readers,
    dataset_libraries,
    targets,
    families,
]


def reset_registries() -> None:
    for registry in REGISTRIES:
        registry.reset()


manager.on_plugin_removed(reset_registries)


def get_backend(name: str):
    return backends.get(name)


def get_target(name: str) -> Target:
    """The target the config's ``target`` names (an unknown name: one line listing the others)."""
    return targets.get(name)


def _family_name(name: Any) -> bool:
    """Whether ``name`` is one the config's ``task`` can give (its pattern)."""
    return isinstance(name, str) and re.fullmatch(TASK_NAME, name) is not None


def get_family(name: str) -> TaskFamily:
    """The task family the config's ``task`` names (an unknown name: one line listing the others)."""
    return families.get(name)


def _family_kind(name: str) -> Task | None:
    """A registered family's kind, for ``ExperimentConfig.kind`` (see ``config.schema.TASK_KINDS``)."""
    entry = families._collect().get(name)
    return entry.value.kind if entry is not None else None


TASK_KINDS.append(_family_kind)


def default_backend() -> str:
    """The backend for a config that names none."""
    name = manager.default_backend_name()
    if name is None:
        raise ConfigError(
            f"No backend was chosen and none is the default; pass --backend "
            f"(available: {', '.join(backends.names()) or 'none'})."
        )
    return name
