"""``gnnbridge tune``: a hyperparameter search whose trials are ordinary runs, its study in a database.

Why trials are ordinary runs: a trial is :func:`gnnbridge.core.app.train.run` with the trial's
values as ``--set`` overrides, into ``DIR/trial-K`` (the same DDP job ``gnnbridge train``
starts, the same checkpoints, ``config.yaml`` and ``results.json``), so the best trial's folder
is a run folder that ``evaluate``, ``predict``, ``export`` and ``serve`` take as it is, and an
interrupted trial continues with ``train.run(resume=...)``. Optuna (imported lazily: the
``tune`` extra) keeps the study; nothing here re-implements a sampler, a pruner or a storage.

Pruning, the smallest sound mechanism: ``train.run(on_epoch=...)`` calls a picklable
:class:`Reporter` on rank 0 after every epoch. It reports the epoch's monitor to the trial in the
study's storage (rank 0 opens the storage itself: the pruner is rebuilt there from its name, as
Optuna keeps no pruner in a database) and returns a reason when the pruner says stop; the
trainer passes that answer to every rank through the job's store, so all ranks stop after the
same epoch, write their checkpoint and results, and none waits in a collective for a rank
that left. The trial is then told PRUNED.

Resume: the study lives in the storage (``sqlite:///DIR/study.db`` by default), and a trial is
told only once its run has finished, so a killed search loses no finished trial. Each running
trial records its owner (host and process id); a later ``tune`` with the same study takes over
a running trial whose owner was interrupted (SIGINT / SIGTERM, recorded) or is a process of
this host that is gone, and finishes it in its folder: from its latest checkpoint where one
exists, else from the start, with the same values. ``--trials N`` is the study's total, so the
same command resumes the search and a larger N extends it. Several ``tune`` processes (or
machines) may share one study through one storage URL; each runs trials until the study holds N
(the last ones to start may each add one). ``--parallel K`` starts K such processes on this
machine, each on devices of its own (:mod:`.tune_parallel`).
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import signal
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gnnbridge.core import files
from gnnbridge.core.app.resolve import resolve_config
from gnnbridge.core.config import ExperimentConfig
from gnnbridge.core.errors import (
    ConfigError,
    DataFileNotFoundError,
    GnnBridgeError,
    OutputExistsError,
    RunInterrupted,
    last_signal,
    record_interrupts,
    signal_name,
)
from gnnbridge.core.inference import checkpoint
from gnnbridge.core.plugins import get_target
from gnnbridge.core.runtime import held_stops

TUNE_FILE = "tune.json"  # DIR/tune.json: the study's name and storage, the experiment and the space
SAMPLERS = ("tpe", "random", "grid")
PRUNERS = ("none", "median", "halving")
RANGES = {"uniform": "a float in [low, high]", "log": "a float in [low, high], log scale",
          "int": "an integer in [low, high]", "int_log": "an integer in [low, high], log scale"}  # fmt: skip
# Keys a trial may not change: they decide the objective itself (or were not the study's own).
NOT_TUNED = ("train.monitor", "target", "task")


def _optuna():
    try:
        import optuna
    except ImportError:
        raise ConfigError("gnnbridge tune needs Optuna (not installed): pip install 'gnnbridge[tune]'.") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


# ------------------------------------------------------------------ the search space


@dataclass(frozen=True)
class Param:
    """One tuned key: ``choices`` (any YAML values), or a ``kind`` of range over ``low``..``high``."""

    key: str
    kind: str  # "choice" or one of RANGES
    choices: tuple = ()
    low: float = 0.0
    high: float = 0.0

    @property
    def plain(self) -> bool:
        """Choices Optuna stores as they are (else each is stored as its JSON text)."""
        return all(c is None or isinstance(c, (bool, int, float, str)) for c in self.choices)

    def encoded(self) -> list:
        return list(self.choices) if self.plain else [json.dumps(c) for c in self.choices]

    def suggest(self, trial) -> Any:
        """The trial's value of this key (asked of Optuna's sampler)."""
        if self.kind == "choice":
            return trial.suggest_categorical(self.key, self.encoded())
        if self.kind in ("int", "int_log"):
            return trial.suggest_int(self.key, int(self.low), int(self.high), log=self.kind == "int_log")
        return trial.suggest_float(self.key, self.low, self.high, log=self.kind == "log")

    def decode(self, stored: Any) -> Any:
        return json.loads(stored) if self.kind == "choice" and not self.plain else stored

    def values_to_check(self) -> list:
        """Every value a trial can get that validation must see: each choice, both range ends."""
        if self.kind == "choice":
            return list(self.choices)
        if self.kind in ("int", "int_log"):
            return [int(self.low), int(self.high)]
        return [self.low, self.high]

    def grid(self) -> list:
        """The values ``--sampler grid`` walks through (a float range has none: refused)."""
        if self.kind == "choice":
            return self.encoded()
        if self.kind in ("int", "int_log"):
            return list(range(int(self.low), int(self.high) + 1))
        raise ConfigError(
            f"--sampler grid needs choices or integer ranges, but {self.key} is a float range ({self.kind}); "
            f"give it as a list of values, e.g. {self.key}: [{self.low}, {self.high}]."
        )


def override(key: str, value: Any) -> str:
    """``KEY=VALUE`` as ``--set`` takes it (JSON is YAML: lists, numbers, strings, null)."""
    return f"{key}={json.dumps(value)}"


def load_space(path: str | os.PathLike) -> list[Param]:
    """The search space in ``path`` (YAML: ``KEY: [choices]`` or ``KEY: {RANGE: [low, high]}``)."""
    path = Path(path)
    if not path.is_file():
        raise DataFileNotFoundError(f"Search space '{path}' does not exist; give a YAML file (docs: tuning).")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        line = str(exc).splitlines()[0]
        raise ConfigError(f"Search space '{path}' is not valid YAML: {line}.") from None
    return parse_space(data, str(path))


def parse_space(data: Any, where: str = "the search space") -> list[Param]:
    if not isinstance(data, dict) or not data:
        raise ConfigError(
            f"{where} must map config keys to choices or ranges, e.g. train.lr: {{log: [1e-4, 1e-1]}} and "
            "model.hidden: [64, 128, 256]."
        )
    return [_param(str(key), spec, where) for key, spec in data.items()]


def _param(key: str, spec: Any, where: str) -> Param:
    if key in NOT_TUNED:
        raise ConfigError(f"{where}: {key} cannot be tuned (it decides the objective); set it with --set instead.")
    if isinstance(spec, list):
        if not spec:
            raise ConfigError(f"{where}: {key} has no choices; give a list of values, e.g. {key}: [a, b].")
        return Param(key, "choice", choices=tuple(spec))
    kinds = ", ".join(f"{name} ({text})" for name, text in RANGES.items())
    if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in RANGES:
        raise ConfigError(
            f"{where}: {key}: {json.dumps(spec, default=str)} is neither a list of choices nor one range; "
            f"give [choices] or one of {kinds}, e.g. {key}: {{uniform: [0, 1]}}."
        )
    kind, ends = next(iter(spec.items()))
    numbers = isinstance(ends, list) and len(ends) == 2 and all(_is_number(e) for e in ends)
    if not numbers or ends[0] > ends[1]:
        raise ConfigError(f"{where}: {key}: {{{kind}: {ends}}} must be [low, high] with low <= high, two numbers.")
    if kind.startswith("int") and not all(float(e).is_integer() for e in ends):
        raise ConfigError(f"{where}: {key}: {{{kind}: {ends}}} needs integer ends.")
    if kind.endswith("log") and ends[0] <= 0:
        raise ConfigError(f"{where}: {key}: {{{kind}: {ends}}} is on a log scale, so low must be > 0.")
    return Param(key, kind, low=ends[0], high=ends[1])


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_space(space: list[Param], resolve) -> None:
    """Every value any trial can get passes the checks ``--set`` passes (``resolve(overrides)``
    raises :class:`ConfigError` naming it), one key at a time, before any trial starts."""
    for param in space:
        for value in param.values_to_check():
            try:
                resolve([override(param.key, value)])
            except GnnBridgeError as exc:
                raise type(exc)(f"Search space {param.key}={json.dumps(value)}: {exc}") from None


# ------------------------------------------------------------------ reporting from rank 0


@dataclass
class Reporter:
    """``on_epoch`` of a trial's run, on its rank 0: report the monitor, return a reason to stop
    when the pruner says so. Picklable (plain fields); the study is opened on first use."""

    storage: str
    study: str
    trial_id: int
    monitor: str
    pruner: str
    _opened: Any = field(default=None, repr=False, compare=False)  # the study, once opened (not pickled)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_opened": None}

    def __call__(self, stats: dict) -> str | None:
        value = stats.get(self.monitor)
        if value is None or not math.isfinite(value):
            return None
        optuna = _optuna()
        with held_stops.stops_held():  # a stop inside a write kept its lock from the mark "interrupted"
            if self._opened is None:
                storage, pruner = open_storage(self.storage), make_pruner(self.pruner)
                self._opened = optuna.load_study(study_name=self.study, storage=storage, pruner=pruner)
            trial = optuna.Trial(self._opened, self.trial_id)
            trial.report(float(value), step=int(stats["epoch"]))
            prune = trial.should_prune()
        if prune:
            return f"pruned by the {self.pruner} pruner after epoch {stats['epoch'] + 1} ({self.monitor} {value:.4f})"
        return None


def open_storage(url: str):
    """Optuna's storage for ``url``; SQLite waits for a lock (several ranks and processes write)."""
    optuna = _optuna()
    if not url.startswith("sqlite"):
        return url
    from sqlalchemy.exc import IntegrityError, OperationalError

    for attempt in range(3):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 120}})
        except (IntegrityError, OperationalError):  # two processes created a new file's tables at once
            if attempt == 2:  # (the second finds them made: "already exists", a duplicate version row)
                raise
    raise AssertionError("unreachable")


def make_pruner(name: str):
    optuna = _optuna()
    if name == "median":  # a trial stops once its epoch is below the median of earlier trials' same epoch
        return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=1)
    if name == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)
    return optuna.pruners.NopPruner()


def make_sampler(name: str, space: list[Param], seed: int):
    optuna = _optuna()
    if name == "grid":
        return optuna.samplers.GridSampler({p.key: p.grid() for p in space}, seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


# ------------------------------------------------------------------ the search


@dataclass
class Search:
    """One ``tune`` process's part of a study: what each trial runs and where."""

    experiment: Any
    space: list[Param]
    out: Path
    storage: str
    study_name: str
    pruner: str
    overrides: list[str]
    flags: dict  # backend, nproc, device, dataset, timeout: as train takes them
    monitor: str
    progress: bool = False
    say: Any = print

    def trial_overrides(self, trial) -> list[str]:
        return [*self.overrides, *(override(p.key, p.decode(trial.params[p.key])) for p in self.space)]


def tune(
    experiment: Any = None,
    *,
    space: str | os.PathLike | dict,
    trials: int,
    out: str | os.PathLike,
    study: str | None = None,
    storage: str | None = None,
    sampler: str = "tpe",
    pruner: str = "none",
    seed: int = 0,
    backend: str | None = None,
    nproc: int | None = None,
    device: str | None = None,
    dataset: str | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    timeout: float | None = None,
    parallel: int = 1,
    progress: bool = False,
    say=print,
) -> dict:
    """Run (or resume, or extend) a study until it holds ``trials`` trials; return :func:`show`'s summary.

    Everything is checked (the space against the experiment, as ``--set`` values; the names of the
    sampler and pruner; Optuna) before anything is written."""
    optuna = _optuna()
    if not isinstance(trials, int) or trials < 1:
        raise ConfigError(f"--trials {trials}: give the number of trials the study should hold (1 or more).")
    if not isinstance(parallel, int) or parallel < 1:
        raise ConfigError(f"--parallel {parallel}: give the number of trials to run at once (1 or more).")
    for name, value, valid in (("--sampler", sampler, SAMPLERS), ("--pruner", pruner, PRUNERS)):
        if value not in valid:
            raise ConfigError(f"{name} {value!r} is not one of {', '.join(valid)}.")
    out = Path(out).absolute()
    raw = load_space(space) if not isinstance(space, dict) else None
    params = raw if raw is not None else parse_space(space)
    flags = {"backend": backend, "nproc": nproc, "device": device, "dataset": dataset, "timeout": timeout}
    base = resolve_config(experiment, overrides=list(overrides), **flags)
    check_space(params, lambda extra: resolve_config(experiment, overrides=[*overrides, *extra], **flags))
    if sampler == "grid":
        for param in params:
            param.grid()  # a float range has no grid: refused here
    if parallel > 1:
        from gnnbridge.core.app.tune_parallel import device_sets

        device_sets(parallel, base)  # too few GPUs for K trials of nproc ranks: refused here
    record = {
        "study": study or base.name,
        "storage": storage or f"sqlite:///{out / 'study.db'}",
        "experiment": experiment if experiment is None or isinstance(experiment, str) else os.fspath(experiment),
        "space": {p.key: _spec(p) for p in params},
        "overrides": list(overrides),
        "flags": flags,
        "sampler": sampler,
        "pruner": pruner,
        "seed": seed,
        "monitor": base.train.monitor,
    }
    _check_folder(out, record)
    out.mkdir(parents=True, exist_ok=True)
    files.write_json(out / TUNE_FILE, record)
    the_study = optuna.create_study(
        study_name=record["study"],
        storage=open_storage(record["storage"]),
        direction=direction(base),
        sampler=make_sampler(sampler, params, seed),
        pruner=make_pruner(pruner),
        load_if_exists=True,
    )
    search = Search(
        experiment, params, out, record["storage"], record["study"], pruner, list(overrides), flags,
        base.train.monitor, progress, say,
    )  # fmt: skip
    taken = [t._trial_id for t in _interrupted(the_study)]
    if parallel == 1:
        from gnnbridge.core.runtime.launcher import interrupt_on_sigterm

        with interrupt_on_sigterm():  # a stop between trials ends in its line too, as inside one
            _work(search, the_study, trials, taken)
    else:
        from gnnbridge.core.app.tune_parallel import parallel_search

        parallel_search(experiment, record, out, trials, parallel, base, taken, progress, say)
    return show(out, say=say)


def _work(search: Search, study, trials: int, taken: list[int], worker: int | None = None) -> None:
    """One process's loop: finish the trials it took over, then ask for new ones until the
    study holds ``trials`` (counted before each ask: searches sharing the study may each add one)."""
    optuna = _optuna()
    try:
        for trial_id in taken:
            held_stops.hold()
            _run_trial(search, study, optuna.Trial(study, trial_id), taken_over=True, worker=worker)
        while _held(study) < trials and not _grid_done(study):
            held_stops.hold()  # released inside _run_trial, once the trial is recorded as ours
            trial = study.ask()
            for param in search.space:
                param.suggest(trial)
            _run_trial(search, study, trial, worker=worker)
    finally:
        held_stops.release()  # (where a failure came before _run_trial released them)


def _spec(param: Param) -> Any:
    return list(param.choices) if param.kind == "choice" else {param.kind: [param.low, param.high]}


def direction(config: ExperimentConfig) -> str:
    """The experiment's own order of its monitor: ``val_acc`` up, ``val_rmse`` down."""
    lower = config.train.monitor.split("_", 1)[-1] in get_target(config.target).lower_is_better
    return "minimize" if lower else "maximize"


def _check_folder(out: Path, record: dict) -> None:
    """``DIR`` is new, empty, or this study's own folder with the same space (a resume)."""
    path = out / TUNE_FILE
    if path.is_file():
        try:
            earlier = json.loads(path.read_text())
        except ValueError:
            earlier = {}
        for key in ("study", "storage", "space"):
            if earlier.get(key) != record[key]:
                raise OutputExistsError(
                    f"{out} holds study '{earlier.get('study')}' with another {key} ({json.dumps(earlier.get(key))}); "
                    "resume it with its own space and study, or tune into another --out."
                )
    elif out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise OutputExistsError(f"--out {out} exists and is not a tune folder; give a new or empty folder.")


def _held(study) -> int:
    """Trials the study holds: finished (any state) or running somewhere."""
    return sum(1 for t in study.get_trials(deepcopy=False) if t.state.name != "WAITING")


def _grid_done(study) -> bool:
    """``--sampler grid`` has walked its whole grid (the study ends there, short of ``--trials``)."""
    exhausted = getattr(study.sampler, "is_exhausted", None)
    return bool(exhausted and exhausted(study))


def _told(study, trial, *args, **kwargs) -> None:
    """``study.tell``; Optuna's grid sampler calls ``study.stop()`` once its grid is done, which
    raises outside ``study.optimize`` after the trial is stored: that is the end, not an error."""
    try:
        study.tell(trial, *args, **kwargs)
    except RuntimeError as exc:
        if "Study.stop" not in str(exc):
            raise


def _interrupted(study) -> list:
    """Running trials whose search stopped: interrupted (recorded), or owned by a gone process here."""
    host = platform.node()
    out = []
    for t in study.get_trials(deepcopy=False, states=(_optuna().trial.TrialState.RUNNING,)):
        owner = t.user_attrs.get("owner") or {}
        gone = owner.get("host") == host and not _alive(owner.get("pid"))
        if t.user_attrs.get("interrupted") or gone:
            out.append(t)
    return out


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _run_trial(search: Search, study, trial, taken_over: bool = False, worker: int | None = None) -> None:
    """One trial as an ordinary run; told COMPLETE, PRUNED or FAIL (with its one-line reason)."""
    from gnnbridge.core.app import train

    optuna = _optuna()
    folder = Path(trial.user_attrs.get("run_dir") or search.out / f"trial-{trial.number}")
    sets = trial.user_attrs.get("overrides") or search.trial_overrides(trial)
    trial.set_user_attr("run_dir", str(folder))
    trial.set_user_attr("overrides", sets)
    trial.set_user_attr("owner", {"host": platform.node(), "pid": os.getpid()})
    trial.set_user_attr("interrupted", False)
    if worker is not None:
        trial.set_user_attr("worker", worker)  # which of --parallel's workers ran it (its pid: owner)
    settings = "  ".join(s for s in sets[len(search.overrides) :])
    search.say(f"trial {trial.number}{' (continued)' if taken_over else ''}: {settings}")
    hook = Reporter(search.storage, search.study_name, trial._trial_id, search.monitor, search.pruner)
    flags = {k: v for k, v in search.flags.items() if k in ("nproc", "device", "timeout")}
    try:
        held_stops.release()
        if (folder / "results.json").is_file() and taken_over:
            results = json.loads((folder / "results.json").read_text())
        elif taken_over and checkpoint.has_checkpoint(folder):
            results = train.run(resume=folder, on_epoch=hook, progress=search.progress, **flags)
        else:
            if taken_over and folder.exists():
                shutil.rmtree(folder)  # this trial's own folder, cut before its first checkpoint
            results = train.run(
                search.experiment, overrides=sets, out=folder, on_epoch=hook, progress=search.progress,
                backend=search.flags["backend"], dataset=search.flags["dataset"], **flags,
            )  # fmt: skip
    except KeyboardInterrupt:
        with held_stops.stops_held():
            trial.set_user_attr("interrupted", True)  # the next tune of this study finishes it
        raise
    except Exception as exc:  # noqa: BLE001 - a failed trial is recorded and the search goes on
        _stopped_meanwhile(trial)  # a stop the run reported as its own failure (while it started)
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if not isinstance(exc, GnnBridgeError):
            reason = f"{type(exc).__name__}: {reason}"
        trial.set_user_attr("fail_reason", reason)
        _told(study, trial, state=optuna.trial.TrialState.FAIL)
        search.say(f"trial {trial.number} failed: {reason}")
        return
    _stopped_meanwhile(trial)
    with held_stops.stops_held():  # told whole; a stop meanwhile comes after
        _tell(search, study, trial, results)


def _stopped_meanwhile(trial) -> None:
    """A stop signal that reached this process during the trial interrupts it, whatever the run
    made of it (a run stopped while it started can end in its own error, or return early): the
    trial is marked interrupted, not told failed or complete, so the next ``tune`` finishes it."""
    signum = last_signal()
    if signum is not None:
        trial.set_user_attr("interrupted", True)
        raise RunInterrupted(
            signum,
            f"Stopped by {signal_name(signum)}: trial {trial.number} is recorded as interrupted; run the same "
            "command again to finish it.",
        ) from None


def _tell(search: Search, study, trial, results: dict) -> None:
    optuna = _optuna()
    value, epochs = results["best"]["value"], len(results["history"])
    trial.set_user_attr("epochs", epochs)
    trial.set_user_attr("test", {k: v for k, v in results["metrics"].items() if k.startswith("test_")})
    stopped = results.get("stopped_by")
    if stopped:
        trial.set_user_attr("pruned", stopped["reason"])
        _told(study, trial, state=optuna.trial.TrialState.PRUNED)
        search.say(f"trial {trial.number} {stopped['reason']}")
    elif value is None or not math.isfinite(value):
        trial.set_user_attr("fail_reason", f"{search.monitor} was undefined in every epoch")
        _told(study, trial, state=optuna.trial.TrialState.FAIL)
        search.say(f"trial {trial.number} failed: {search.monitor} was undefined in every epoch")
    else:
        _told(study, trial, float(value))
        search.say(f"trial {trial.number}: {search.monitor} {value:.4f} after {epochs} epoch(s)")


# ------------------------------------------------------------------ reading a study


def show(out: str | os.PathLike, say=print) -> dict:
    """The study of tune folder ``out`` at a glance: the table of trials, ``DIR/best.yaml``, the
    link ``DIR/best`` to the best trial's run folder, and ``DIR/history.png`` /
    ``DIR/importance.png``; returns ``{"trials": rows, "best": {...} or None}``."""
    optuna = _optuna()
    out = Path(out).absolute()
    path = out / TUNE_FILE
    if not path.is_file():
        raise DataFileNotFoundError(f"'{out}' is not a tune folder (it has no {TUNE_FILE}); give the --out of a tune.")
    record = json.loads(path.read_text())
    try:
        study = optuna.load_study(study_name=record["study"], storage=open_storage(record["storage"]))
    except KeyError:
        raise DataFileNotFoundError(f"Study '{record['study']}' is not in {record['storage']} (yet).") from None
    rows = [_row(t) for t in study.get_trials(deepcopy=False)]
    say(table(rows, list(record["space"])))
    best = _best(study)
    summary = {"study": record["study"], "storage": record["storage"], "trials": rows, "best": None}
    if best is not None:
        summary["best"] = _keep_best(out, best, record)
        b = summary["best"]
        say(f"best: trial {best.number}, {record_monitor(record)} {best.value:.4f}; run folder {out / 'best'}")
        say(f"best settings: {b['yaml']} (gnnbridge train {b['yaml']})")
    summary["plots"] = _plots(study, out)
    return summary


def record_monitor(record: dict) -> str:
    return record.get("monitor", "value")


def _best(study):
    try:
        return study.best_trial
    except ValueError:  # no complete trial yet
        return None


def _row(t) -> dict:
    attrs = t.user_attrs
    ended, began = t.datetime_complete, t.datetime_start
    seconds = (ended - began).total_seconds() if ended and began else None
    value = t.value
    if value is None and t.intermediate_values:
        value = t.intermediate_values[max(t.intermediate_values)]
    return {
        "trial": t.number,
        "state": t.state.name.lower(),
        "value": value,
        "epochs": attrs.get("epochs", len(t.intermediate_values) or None),
        "seconds": seconds,
        "params": dict(t.params),
        "run_dir": attrs.get("run_dir"),
        "reason": attrs.get("fail_reason") or attrs.get("pruned") or "",
    }


def table(rows: list[dict], keys: list[str]) -> str:
    """The trials as aligned text columns: number, state, monitor, epochs, seconds, each key, reason."""
    head = ["trial", "state", "value", "epochs", "seconds", *keys, "reason"]
    body = [
        [
            str(r["trial"]), r["state"], _fmt(r["value"]), str(r["epochs"] or "-"), _fmt(r["seconds"], 1),
            *(_fmt(r["params"].get(k)) for k in keys), r["reason"],
        ]
        for r in rows
    ]  # fmt: skip
    widths = [max(len(str(c)) for c in col) for col in zip(head, *body)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip() for line in [head, *body])


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        tiny_or_huge = value and not 1e-3 <= abs(value) < 1e5
        return f"{value:.{digits}g}" if tiny_or_huge else f"{value:.{digits}f}"
    return str(value)


def _keep_best(out: Path, best, record: dict) -> dict:
    """``DIR/best.yaml`` (the best trial's resolved config: a ready experiment) and ``DIR/best``
    (a relative link to its run folder, replaced as the best changes)."""
    run_dir = Path(best.user_attrs.get("run_dir", ""))
    config_file = run_dir / "config.yaml"
    if config_file.is_file():
        text = config_file.read_text()
    else:  # the trial ran on another machine: the same config, resolved here
        flags = record["flags"]
        config = resolve_config(record["experiment"], overrides=best.user_attrs.get("overrides", []), **flags)
        text = yaml.safe_dump(config.to_dict(), sort_keys=False)
    files.write_text(out / "best.yaml", text)
    link = out / "best"
    if run_dir.is_dir() and run_dir.parent == out:
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(run_dir.name, target_is_directory=True)
    return {
        "trial": best.number,
        "value": best.value,
        "params": dict(best.params),
        "run_dir": str(run_dir),
        "yaml": str(out / "best.yaml"),
        "test": best.user_attrs.get("test", {}),
    }


def _plots(study, out: Path) -> list[str]:
    """Optuna's own plots (matplotlib): the monitor per trial over time, and each key's importance
    (fANOVA over the complete trials; drawn once two or more complete trials vary)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from optuna.visualization import matplotlib as ovm
    except ImportError:  # pragma: no cover - matplotlib is a dependency
        return []
    made = []
    for name, draw in (("history.png", ovm.plot_optimization_history), ("importance.png", ovm.plot_param_importances)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ax = draw(study)
            fig = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
            fig.tight_layout()
            files.replace(out / name, lambda f, fig=fig: fig.savefig(f, dpi=100, format="png"))
            made.append(str(out / name))
        except (ValueError, RuntimeError, ZeroDivisionError):
            pass  # too few complete trials for that plot yet
        finally:
            plt.close("all")
    return made


def worker_main(text: str) -> None:
    """A ``--parallel`` worker's program (started by :mod:`.tune_parallel`): the single ``tune``
    loop on the study the parent created; its lines are prefixed ``[worker K]``; it ends as a
    ``gnnbridge`` command does (one line, an exit code)."""
    from gnnbridge.core.runtime.launcher import interrupt_on_sigterm, own_this_process

    spec = json.loads(text)
    own_this_process()  # the worker's process is gnnbridge's alone, as the command line's is
    record_interrupts()
    k = spec["worker"]
    try:
        with interrupt_on_sigterm():
            _run_worker(spec, lambda line: print(f"[worker {k}] {line}", flush=True))
    except KeyboardInterrupt as exc:
        sys.stdout.flush()
        os._exit(128 + int(getattr(exc, "signum", signal.SIGINT)))
    except Exception as exc:  # noqa: BLE001 - a worker's failure is one line, as a command's is
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"Error: worker {k}: {line}", file=sys.stderr, flush=True)
        os._exit(1)
    sys.stdout.flush()
    os._exit(0)


def _run_worker(spec: dict, say) -> None:
    from pathlib import Path

    optuna = _optuna()
    params = parse_space(spec["space"])
    study = optuna.load_study(
        study_name=spec["study"],
        storage=open_storage(spec["storage"]),
        sampler=make_sampler(spec["sampler"], params, spec["seed"]),
        pruner=make_pruner(spec["pruner"]),
    )
    search = Search(
        spec["experiment"], params, Path(spec["out"]), spec["storage"], spec["study"], spec["pruner"],
        list(spec["overrides"]), spec["flags"], spec["monitor"], spec["progress"], say,
    )  # fmt: skip
    _work(search, study, spec["trials"], spec["taken"], worker=spec["worker"])
