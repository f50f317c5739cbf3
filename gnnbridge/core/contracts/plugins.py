"""Plugin machinery: the pluggy manager, plugin loading, and the name registries.

Plugins load once, lazily, on first use: every installed package exposing the ``gnnbridge``
entry-point group (gnnbridge's own backends and datasets included, declared in its
``pyproject.toml``), then the default modules the package named with :func:`set_defaults` that
were not already loaded that way (a source checkout that was never pip-installed has no entry
points). Core itself names no plugin and no backend: the ``gnnbridge`` package, which sits above
core, hands over its built-in list and default backend when it is imported.

``GNNBRIDGE_LOAD_PLUGINS=a,b`` restricts loading to the named plugins (empty: load none), which
is how tests and users isolate a misbehaving third-party package.

A plugin that fails to import, implements a hook gnnbridge does not have, or raises inside a
registration hook is named in one warning line on stderr and left out; everything else keeps
working (a name it would have added is then "unknown", after that warning). A plugin that
registers something invalid, or a name another plugin holds, is an error naming the plugin(s):
which of two models a config means cannot be guessed.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import importlib.metadata
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pluggy

from gnnbridge.core.config import Task
from gnnbridge.core.contracts import hookspecs
from gnnbridge.core.errors import ConfigError, GnnBridgeError, did_you_mean, signal_received, unknown_name

ENTRY_POINT_GROUP = "gnnbridge"
ENV_LOAD = "GNNBRIDGE_LOAD_PLUGINS"
# Set by gnnbridge's launcher for the ranks it starts: the launching process printed the warnings.
ENV_WARNED = "GNNBRIDGE_PLUGIN_WARNINGS_SHOWN"
_failures: dict[str, str] = {}  # plugin name -> why it was left out
_loading: list[str] = []  # the plugin being imported now (registries must not be used then)


def _quiet() -> bool:
    """Whether another process of this job shows plugin warnings: the launching process (for the
    ranks it starts), or rank 0 (in a torchrun / SLURM job)."""
    if ENV_WARNED in os.environ:
        return True
    return (os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or "0") != "0"


def warn(line: str) -> None:
    """One warning line on stderr, once per job."""
    if not _quiet():
        print(f"Warning: {line}", file=sys.stderr)


pm = pluggy.PluginManager(hookspecs.PROJECT)
pm.add_hookspecs(hookspecs)
_lock = threading.RLock()
_loaded = False
_defaults: dict[str, str] = {}  # plugin name -> module, loaded when no entry point provided it
_default_backend: str | None = None


class PluginError(GnnBridgeError, RuntimeError):
    """A plugin failed to load or registered something invalid."""


def _allowed() -> set[str] | None:
    raw = os.environ.get(ENV_LOAD)
    if raw is None:
        return None
    return {part.strip() for part in raw.split(",") if part.strip()}


def load_plugins() -> None:
    """Load entry-point and built-in plugins once; later calls do nothing."""
    global _loaded
    with _lock:
        if _loaded:
            return
        if _loading:  # a plugin's import reached a registry: loading again would recurse forever
            raise PluginError(
                f"Plugin '{_loading[-1]}' uses gnnbridge's registries while it is imported; use them "
                "inside its hooks instead."
            )
        allowed = _allowed()
        points = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
        _check_allowed(allowed, {ep.name for ep in points} | set(_defaults))
        for ep in points:
            if allowed is None or ep.name in allowed:
                _load_one(ep.name, ep.value, ep.load)
        for name, module in _defaults.items():
            if allowed is None or name in allowed:
                _load_one(name, module, lambda module=module: importlib.import_module(module))
        _loaded = True


def _load_one(name: str, where: str, load: Callable[[], Any]) -> None:
    """Import and register one plugin, or warn and leave it out (a broken third-party package
    must not take the command line, or the other plugins, down with it)."""
    held = pm.get_plugin(name)
    if held is not None or name in _failures:
        if held is not None and getattr(held, "__name__", where) != where.partition(":")[0]:
            warn(
                f"plugin name '{name}' is taken by {getattr(held, '__name__', held)}; {where} is left out "
                f"(two installed packages use the name; uninstall one)"
            )
        return
    _loading.append(name)
    try:
        with stdout_to_stderr():
            plugin = load()
    except BaseException as exc:  # noqa: BLE001 - ImportError, or anything its import raises
        if not is_plugin_fault(exc):
            raise
        return plugin_failed(name, f"({where}) failed to load: {_what(exc)}")
    finally:
        _loading.pop()
    if pm.is_registered(plugin):
        return
    unknown = [
        attr
        for attr in dir(plugin)
        if getattr(getattr(plugin, attr, None), f"{hookspecs.PROJECT}_impl", None) is not None
        and not hasattr(hookspecs, attr)
    ]
    if unknown:
        hooks = [n for n in dir(hookspecs) if n.startswith("register_")]
        return plugin_failed(
            name,
            f"({where}) implements '{unknown[0]}', which is not a gnnbridge hook"
            f"{did_you_mean(unknown[0], hooks)}; hooks: {', '.join(hooks)}",
        )
    try:
        pm.register(plugin, name=name)
    except pluggy.PluginValidationError as exc:
        plugin_failed(name, f"({where}) has a malformed hook: {_short(exc)}")


def plugin_failed(name: str, why: str) -> None:
    """Leave plugin ``name`` out, saying why in one warning line (once per job)."""
    _failures[name] = why
    plugin = pm.get_plugin(name)
    if plugin is not None:
        pm.unregister(plugin)
        reset_registries()  # what it registered elsewhere goes with it
    warn(f"plugin '{name}' {why}; it is left out (uninstall it, or exclude it with {ENV_LOAD}).")


def is_plugin_fault(exc: BaseException) -> bool:
    """Whether ``exc``, raised while plugin code ran, is that plugin's failure. Not so for
    gnnbridge's own errors, memory exhaustion, a failed peer, or a Ctrl-C / SIGTERM that really
    arrived. ``SystemExit`` and a ``KeyboardInterrupt`` no signal caused are the plugin's: they
    must not end a command as a success or look like the user stopped it."""
    if isinstance(exc, (GnnBridgeError, MemoryError, GeneratorExit)):
        return False
    if isinstance(exc, KeyboardInterrupt):
        return not signal_received()
    if isinstance(exc, SystemExit):
        return True
    if not isinstance(exc, Exception):
        return False
    torch = sys.modules.get("torch")
    return torch is None or not isinstance(exc, (torch.OutOfMemoryError, torch.distributed.DistError))


def _what(exc: BaseException) -> str:
    """``Type: first line`` of a plugin's exception; SystemExit says what it exits with."""
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r}) (a plugin must raise an exception, not exit the process)"
    if isinstance(exc, KeyboardInterrupt):
        return "KeyboardInterrupt, though no Ctrl-C or signal arrived"
    return f"{type(exc).__name__}: {_short(exc)}"


@contextlib.contextmanager
def stdout_to_stderr():
    """While plugin code loads or registers, what it prints goes to stderr: stdout is the
    command's output (``models --json``, ``config show > file.yaml``)."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


@contextlib.contextmanager
def blame(origin: str, what: str):
    """Turn an exception from a plugin's code (a model's forward, a sampler's loader) into one
    line naming it (see :func:`is_plugin_fault` for what passes through)."""
    try:
        yield
    except BaseException as exc:  # noqa: BLE001
        if not is_plugin_fault(exc):
            raise
        raise PluginError(f"{origin} failed in its {what}: {_what(exc)}") from None


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else "no message"


_downloads: contextvars.ContextVar[bool] = contextvars.ContextVar("gnnbridge_downloads", default=True)


def downloads_allowed() -> bool:
    """Whether a dataset plugin may download or create its files now. ``evaluate`` and
    ``predict`` load the dataset a checkpoint names, and a checkpoint is data, not orders: there a
    dataset must already be where its config says, or the loader raises one line."""
    return _downloads.get()


@contextlib.contextmanager
def _switched_off(flag: contextvars.ContextVar[bool]):
    token = flag.set(False)
    try:
        yield
    finally:
        flag.reset(token)


def no_downloads():
    return _switched_off(_downloads)


_code: contextvars.ContextVar[bool] = contextvars.ContextVar("gnnbridge_code", default=True)


def code_allowed() -> bool:
    """Whether a config may name code to import (``model.arch: module:Class``). Not so for the
    config inside a checkpoint that ``evaluate`` / ``predict`` read, unless the user trusts it:
    importing a module runs it."""
    return _code.get()


def no_code():
    return _switched_off(_code)


def _check_allowed(allowed: set[str] | None, known: set[str]) -> None:
    unknown = sorted((allowed or set()) - known)
    if unknown:
        raise PluginError(
            f"{ENV_LOAD}={os.environ.get(ENV_LOAD)!r} names {', '.join(repr(u) for u in unknown)}, which is not an "
            f"installed plugin{did_you_mean(unknown[0], known)}. Installed: {', '.join(sorted(known))} "
            "(gnnbridge plugins lists them; unset the variable to load all)."
        )


def set_defaults(plugins: dict[str, str], backend: str | None) -> None:
    """Name the plugin modules to load when no entry point provides them, and the backend a
    config without ``backend`` runs on. Called by the ``gnnbridge`` package on import."""
    global _default_backend
    _defaults.update(plugins)
    _default_backend = backend


def is_builtin(plugin: str) -> bool:
    """Whether ``plugin`` is one the package itself ships (see :func:`set_defaults`): its name and
    its module, so a third-party package cannot claim the name to skip the checks on its code."""
    return plugin in _defaults and getattr(pm.get_plugin(plugin), "__name__", None) == _defaults[plugin]


def default_backend() -> str:
    """The backend for a config that names none."""
    if _default_backend is None:
        raise ConfigError(
            f"No backend was chosen and none is the default; pass --backend "
            f"(available: {', '.join(backends.names()) or 'none'})."
        )
    return _default_backend


def plugin_info() -> list[dict]:
    """Loaded plugins (the distribution that installed each, the hooks it implements, what it
    registered) and the plugins left out with why (for ``gnnbridge plugins``)."""
    load_plugins()
    dists = {ep.name: ep.dist for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    out = []
    for name, plugin in sorted(pm.list_name_plugin(), key=lambda item: item[0]):
        if name in _failures:
            continue
        hooks = sorted(h.name for h in pm.get_hookcallers(plugin) or [])
        dist = dists.get(name)
        out.append(
            {
                "name": name,
                "module": getattr(plugin, "__name__", type(plugin).__name__),
                "hooks": hooks,
                "distribution": f"{dist.name} {dist.version}" if dist else None,
                "registers": {r.kind + "s": r.names_from(name) for r in REGISTRIES if r.names_from(name)},
            }
        )
    out += [{"name": name, "error": why} for name, why in sorted(_failures.items())]
    return out


# --------------------------------------------------------------------------- registries


@dataclass
class Entry:
    name: str
    value: Any
    description: str
    plugin: str


class Registry:
    """Names to objects for one kind of thing; errors list what is available."""

    def __init__(
        self, kind: str, hook: str, fix: str = "", expect: Callable[[Any], bool] | None = None, expected: str = ""
    ):
        """``expect``: whether a registered value is of the right kind (``expected`` says which)."""
        self.kind = kind
        self.hook = hook
        self.fix = fix
        self.expect, self.expected = expect, expected
        self._entries: dict[str, Any] | None = None

    def _collect(self) -> dict[str, Any]:
        if self._entries is not None:
            return self._entries
        load_plugins()
        entries: dict[str, Any] = {}
        failed = []
        for impl in getattr(pm.hook, self.hook).get_hookimpls():
            before = {k: list(v) if isinstance(v, list) else v for k, v in entries.items()}
            try:
                with stdout_to_stderr():
                    impl.function(self._register_callback(entries, impl.plugin_name))
            except BaseException as exc:  # noqa: BLE001 - a plugin's bug must not stop the others
                if not is_plugin_fault(exc):
                    raise  # an invalid registration or a taken name: the plugin's author must fix it
                entries.clear()
                entries.update(before)
                failed.append((impl.plugin_name, f"raised in {self.hook}: {_what(exc)}"))
        for name, why in failed:
            plugin_failed(name, why)  # resets every registry: this one is then kept as collected
        self._entries = entries
        return entries

    def _register_callback(self, entries: dict[str, Any], plugin: str) -> Callable[..., None]:
        def register(name: Any, value: Any = None, description: str = "") -> None:
            if value is None and hasattr(name, "name"):  # register(obj) with obj.name / obj.description
                name, value, description = name.name, name, getattr(name, "description", "")
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
datasets = Registry(
    "dataset",
    "register_datasets",
    "Or pass a file: --dataset PATH.npz.",
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
REGISTRIES = (backends, datasets, experiments, models, samplers, loggers)


def reset_registries() -> None:
    for registry in REGISTRIES:
        registry.reset()


def extend_cli(group: Any) -> None:
    """Let every plugin add commands to the click ``group``; a name already taken keeps its command
    (gnnbridge's own first), and the plugin that tried is named in a warning."""
    load_plugins()
    for impl in pm.hook.register_commands.get_hookimpls():  # in the order the plugins were registered
        before = dict(group.commands)
        try:
            with stdout_to_stderr():
                impl.function(group)
        except BaseException as exc:  # noqa: BLE001
            if not is_plugin_fault(exc):
                raise
            group.commands.clear()
            group.commands.update(before)
            plugin_failed(impl.plugin_name, f"raised in register_commands: {_what(exc)}")
            continue
        for name, command in list(group.commands.items()):
            if name in before and before[name] is not command:
                group.commands[name] = before[name]
                owner = getattr(before[name], "gnnbridge_plugin", "gnnbridge")
                warn(
                    f"plugin '{impl.plugin_name}' adds a command '{name}', which plugin '{owner}' already has; the "
                    "first one is kept."
                )
            elif name not in before:
                command.gnnbridge_plugin = impl.plugin_name


def get_backend(name: str):
    return backends.get(name)


def gnnbridge_version() -> str:
    """The installed distribution's version (a source checkout without metadata says so)."""
    try:
        return importlib.metadata.version("gnnbridge")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def library_versions(backend_name: str) -> dict[str, str]:
    """gnnbridge, Python, torch and the backend's libraries: recorded with every result and
    checkpoint, because a number is only reproducible with the stack that produced it."""
    import platform

    import torch

    out = {"gnnbridge": gnnbridge_version(), "python": platform.python_version(), "torch": torch.__version__}
    out.update(backends.get(backend_name).versions())
    return {name: str(version) for name, version in out.items()}  # torch's is a str subclass
