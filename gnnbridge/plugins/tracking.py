"""Built-in tracking loggers: ``mlflow`` and ``wandb`` (``log.to=[mlflow]``, ``[wandb]``),
with Lightning's semantics (its ``MLFlowLogger`` and ``WandbLogger``).

What a tracked run holds, from rank 0 alone: the resolved config as params with flattened keys
(``model.hidden``, ``dataset.options.num_nodes``), every password in a URL hidden; each epoch's
figures with the epoch (counted from 1) as the step; at the end ``final/*`` (``results.json``'s
``metrics``), ``best/*``, ``last/*`` and ``best_epoch``; tags (backend, world size, library
versions, the working folder's git commit when it has one); ``config.yaml``, ``results.json``
and ``curves.png`` as files; and checkpoints as ``log.model`` says (``end``: ``best.pt`` and
``latest.pt`` once the run ends; ``all``: also each checkpoint as it is written).

Resume: the tracked run's id is kept in ``RUN/tracking/<logger>.json``, so ``--resume``
reopens the same run (MLflow: the same run id, marked running again; W&B: ``id=`` with
``resume="allow"``) instead of starting another; core's logger protocol then sends it the epochs
it lacks.

A tracker that is away never stops training: a server that is down or refuses (at the start
or midway) is one warning line, and the logger goes quiet for the rest of the run. The epochs it
did not take are answered ``False`` (see :mod:`gnnbridge.core.training.loggers`), so a later
``--resume`` sends them; the run folder holds everything meanwhile. MLflow's HTTP client would
retry a refused connection for minutes (7 retries, exponential backoff): while these loggers
call it, it retries twice within a few seconds and waits at most 30 s for an answer, unless the
user set ``MLFLOW_HTTP_REQUEST_*`` themselves, and its log lines and printed URLs are held back
(the one warning says what matters). Neither library is imported until a run names it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gnnbridge.core import files
from gnnbridge.core.errors import scrubbed
from gnnbridge.core.inference import checkpoint
from gnnbridge.core.plugins import library_versions

FOLDER = "tracking"  # RUN/tracking/<logger>.json: the tracked run's id, for --resume
RUN_FILES = ("config.yaml", "results.json", "curves.png")  # what a finished run sends
# MLflow's HTTP client while these loggers call it (each only where the user has not set it)
CLIENT_ENV = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
}
QUIET_LOGGERS = ("mlflow", "alembic", "urllib3", "wandb", "git")  # their lines would wrap our one warning
REACH_TIMEOUT_S = 5  # how long the first look at an HTTP tracking server waits


# ---------------------------------------------------------------------- what both trackers send


def params(config) -> dict[str, Any]:
    """The resolved config as flat ``{dotted key: value}`` (a mapping's keys under it too:
    ``dataset.options.num_nodes``); text with any URL's password hidden."""
    out: dict[str, Any] = {}

    def walk(section: dict, prefix: str) -> None:
        for key, value in section.items():
            if isinstance(value, dict) and value:
                walk(value, f"{prefix}{key}.")
            else:
                out[f"{prefix}{key}"] = scrubbed(value) if isinstance(value, str) else value

    walk(config.to_dict(), "")
    return out


def tags(config) -> dict[str, str]:
    """What the run ran on: backend, world size, device, task, library versions, git commit."""
    found = {
        "backend": config.backend,
        "world_size": str(config.nproc),  # a torchrun or SLURM job's size (set before any rank starts)
        "device": config.device.value,
        "experiment": config.name,
        "task": config.task,
        **{f"versions.{name}": str(v) for name, v in library_versions(config.backend).items()},
    }
    commit = git_commit()
    if commit is not None:
        found["git_commit"] = commit
    return found


def git_commit() -> str | None:
    """The commit the working folder is at, when it is in a git repository (else None)."""
    try:
        proc = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = proc.stdout.strip()
    return commit if proc.returncode == 0 and re.fullmatch(r"[0-9a-f]{40,64}", commit) else None


def kept_run(run_dir: Path, name: str) -> dict | None:
    """The tracked run an earlier start of this run folder opened (None: none, or unreadable)."""
    try:
        kept = json.loads((run_dir / FOLDER / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None
    return kept if isinstance(kept, dict) and isinstance(kept.get("run_id"), str) else None


def keep_run(run_dir: Path, name: str, record: dict) -> None:
    (run_dir / FOLDER).mkdir(exist_ok=True)
    files.write_json(run_dir / FOLDER / f"{name}.json", record)


@contextlib.contextmanager
def run_files(run_dir: Path, model: Any) -> Iterator[list[Path]]:
    """The files a finished run sends: :data:`RUN_FILES` that exist, and with ``log.model`` set
    its checkpoints. A file holding a URL's password (a tracking URI typed with one) is sent as a
    copy with it hidden, never as is."""
    found = [run_dir / name for name in RUN_FILES if (run_dir / name).is_file()]
    if model in ("end", "all"):
        found += [
            p for p in (checkpoint.path_in(run_dir, k) for k in (checkpoint.BEST, checkpoint.LATEST)) if p.is_file()
        ]
    with tempfile.TemporaryDirectory(prefix="gnnbridge-tracking-") as scratch:
        sent = []
        for path in found:
            if path.suffix in (".yaml", ".json") and scrubbed(text := path.read_text()) != text:
                path = Path(scratch) / path.name
                path.write_text(scrubbed(text))
            sent.append(path)
        yield sent


def results_metrics(results: dict) -> dict[str, float]:
    """``best/*``, ``last/*`` and ``best_epoch`` (counted from 1, like the steps) of ``results.json``."""
    best, last = results.get("best") or {}, results.get("last") or {}
    out = {f"best/{k}": float(v) for k, v in (best.get("metrics") or {}).items() if _number(v)}
    out |= {f"last/{k}": float(v) for k, v in (last.get("metrics") or {}).items() if _number(v)}
    if isinstance(best.get("epoch"), int):
        out["best_epoch"] = float(best["epoch"] + 1)
    return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# ---------------------------------------------------------------------- the shared logger


class Tracker:
    """What both trackers share: the tracked run is started (or reopened) when the logger opens,
    and every call to the tracking library goes through :meth:`_guard`, which turns a failure
    into one warning line and the logger quiet. A subclass writes ``_start``, ``_log``,
    ``_checkpoint``, ``_finish`` and ``_close``."""

    name = ""  # the logger's name in log.to, as the warning line says it

    def __init__(self, run_dir: Path, config):
        self.run_dir, self.config = Path(run_dir), config
        self.live, self.finished = True, False
        self._guard(None, self._start)

    def log(self, step: int, values: dict[str, float]) -> bool:
        """False when the epoch did not reach the tracker (it is away): a resume sends it again."""
        return self._guard(f"at epoch {step}", self._log, step, values)

    def checkpoint_saved(self, path: Path, step: int) -> None:
        if self.config.log.model == "all":
            self._guard(f"at epoch {step}'s checkpoint", self._checkpoint, path, step)

    def run_finished(self, run_dir: Path) -> None:
        results = json.loads((run_dir / "results.json").read_text())
        self.finished = self._guard("sending the run's results", self._finish, run_dir, results)

    def close(self) -> None:
        self._guard("closing the run", self._close)
        self.live = False

    def _guard(self, doing: str | None, call: Callable, *args) -> bool:
        """``call(*args)`` with the client's settings; False (and, the first time, one warning
        line) when the tracker is away or refuses. ``doing``: when, as the line says it (None: starting)."""
        if not self.live:
            return False
        with _client_settings():
            try:
                call(*args)
                return True
            except Exception as exc:  # noqa: BLE001 - any failure of a tracker: one line, and training goes on
                self.live = False
                what = "this run is not tracked" if doing is None else f"tracking stopped {doing}"
                print(
                    f"Warning: log.to={self.name}: {what}: {reason(exc)}; training goes on and the run folder "
                    "keeps everything.",
                    file=sys.stderr,
                    flush=True,
                )
                return False

    # the tracker's own calls
    def _start(self) -> None:
        raise NotImplementedError

    def _log(self, step: int, values: dict[str, float]) -> None:
        raise NotImplementedError

    def _checkpoint(self, path: Path, step: int) -> None:
        raise NotImplementedError

    def _finish(self, run_dir: Path, results: dict) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        raise NotImplementedError


def reason(exc: BaseException) -> str:
    """A failure in a few words: a connection's own reason under urllib3's wrapping
    (``Connection refused``), else the message's first line; any URL's password hidden."""
    text = scrubbed(str(exc)).strip()
    errno = None if isinstance(exc, Unreachable) else re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", text)
    if errno:
        return errno.group(1).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:240]


class Unreachable(ConnectionError):
    """A tracking server that does not answer; the message is the whole reason."""


@contextlib.contextmanager
def _client_settings() -> Iterator[None]:
    """:data:`CLIENT_ENV` where the user set none, and the trackers' log lines and warnings held
    back, for the length of one call (restored after: the rest of the process is the user's)."""
    added = [k for k in CLIENT_ENV if k not in os.environ]
    os.environ.update({k: CLIENT_ENV[k] for k in added})
    levels = {name: logging.getLogger(name).level for name in QUIET_LOGGERS}
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        for k in added:
            os.environ.pop(k, None)


# ---------------------------------------------------------------------- MLflow


class MlflowLogger(Tracker):
    """A run of an MLflow tracking server or store: ``log.mlflow.tracking_uri``, else
    ``MLFLOW_TRACKING_URI``, else MLflow's default; the experiment ``log.mlflow.experiment``,
    else ``MLFLOW_EXPERIMENT_NAME``, else the experiment's name. Through ``MlflowClient`` (no
    active run is set in the process, as Lightning's logger does it). MLflow's names take
    letters, digits and ``_-./ :``: ``val_hits@50`` is logged as ``val_hits_at_50``."""

    name = "mlflow"

    def _start(self) -> None:
        import mlflow
        from mlflow import MlflowClient

        settings = self.config.log.mlflow
        self.uri = settings.tracking_uri or mlflow.get_tracking_uri()  # the latter reads MLFLOW_TRACKING_URI
        _check_reachable(self.uri)
        self.client = MlflowClient(tracking_uri=self.uri)
        self.run_id = self._reopen() or self._create()

    def _reopen(self) -> str | None:
        """The run this folder's earlier start tracked, on this server, marked running again."""
        from mlflow.entities import Param, RunTag
        from mlflow.exceptions import MlflowException

        kept = kept_run(self.run_dir, self.name)
        if kept is None or kept.get("tracking_uri") != scrubbed(self.uri):
            return None
        try:
            run = self.client.get_run(kept["run_id"])
        except MlflowException:
            return None  # removed from the server meanwhile: a new run
        if run.info.lifecycle_stage != "active":
            return None
        self.client.update_run(run.info.run_id, status="RUNNING")
        old, now = run.data.params, {k: _param_text(v) for k, v in _mlflow_keys(params(self.config)).items()}
        # a param's value cannot change in MLflow: what a resume changed (train.epochs) is a tag
        changed = [RunTag(f"changed_on_resume.{k}", v) for k, v in now.items() if k in old and not _same(old[k], v)]
        new = [Param(k, v) for k, v in now.items() if k not in old]
        self._batch(run.info.run_id, params=new, tags=changed + [RunTag(k, v) for k, v in tags(self.config).items()])
        return run.info.run_id

    def _create(self) -> str:
        from mlflow.entities import Param

        settings = self.config.log.mlflow
        experiment = settings.experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or self.config.name
        found = self.client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found is not None else self._create_experiment(experiment)
        run = self.client.create_run(
            experiment_id, run_name=settings.run_name or self.run_dir.name, tags=tags(self.config)
        )
        values = _mlflow_keys(params(self.config))
        self._batch(run.info.run_id, params=[Param(k, _param_text(v)) for k, v in values.items()])
        record = {"run_id": run.info.run_id, "experiment_id": experiment_id, "tracking_uri": scrubbed(self.uri)}
        keep_run(self.run_dir, self.name, record)
        return run.info.run_id

    def _create_experiment(self, name: str) -> str:
        from mlflow.exceptions import MlflowException

        try:
            return self.client.create_experiment(name)
        except MlflowException:  # another run created it in the meantime
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def _batch(self, run_id: str, metrics=(), params=(), tags=()) -> None:
        """``log_batch`` in the server's limits (1000 metrics, 100 params and tags a call)."""
        metrics, params, tags = list(metrics), list(params), list(tags)
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(run_id, metrics=metrics[i : i + 1000])
        for i in range(0, max(len(params), len(tags)), 100):
            self.client.log_batch(run_id, params=params[i : i + 100], tags=tags[i : i + 100])

    def _metrics(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._batch(self.run_id, metrics=[Metric(k, float(v), now, step) for k, v in _mlflow_keys(values).items()])

    def _log(self, step: int, values: dict[str, float]) -> None:
        self._metrics(step, values)

    def _checkpoint(self, path: Path, step: int) -> None:
        self.client.log_artifact(self.run_id, str(path), f"checkpoints/epoch-{step}")

    def _finish(self, run_dir: Path, results: dict) -> None:
        self._metrics(len(results.get("history", [])), results_metrics(results))
        with run_files(run_dir, self.config.log.model) as sent:
            for path in sent:
                self.client.log_artifact(self.run_id, str(path), "checkpoints" if path.suffix == ".pt" else None)

    def _close(self) -> None:
        self.client.set_terminated(self.run_id, "FINISHED" if self.finished else "FAILED")


def _check_reachable(uri: str) -> None:
    """Refuse, in a line, an HTTP tracking server that does not answer at all (a look of a few
    seconds, before MLflow's client would retry for minutes); any answer, an error status
    included, is for MLflow to read."""
    if not uri.startswith(("http://", "https://")):
        return
    import requests

    try:
        requests.get(uri.rstrip("/") + "/health", timeout=REACH_TIMEOUT_S)
    except requests.RequestException as exc:
        raise Unreachable(f"{scrubbed(uri)} does not answer ({reason(exc)})") from None


def _mlflow_keys(values: dict[str, Any]) -> dict[str, Any]:
    """Names MLflow takes: ``@`` as ``_at_``, any other character it refuses as ``_``, at most
    250 characters."""
    return {re.sub(r"[^\w./\- :]", "_", k.replace("@", "_at_"))[:250]: v for k, v in values.items()}


def _same(old: str, new: str) -> bool:
    """Whether two params' texts say the same (``180`` and ``180.0``: a key read back as a float)."""
    try:
        return old == new or float(old) == float(new)
    except ValueError:
        return False


def _param_text(value: Any) -> str:
    return str(value)[:6000]  # MLflow's limit on a param's value


# ---------------------------------------------------------------------- Weights & Biases


class WandbLogger(Tracker):
    """A W&B run: ``log.wandb.project``, else ``WANDB_PROJECT``, else the experiment's name;
    ``log.wandb.entity``, else W&B's own. With ``WANDB_MODE=offline`` it is written to disk with
    no network or account (``wandb sync`` uploads it later): in ``WANDB_DIR``, else the run
    folder (``RUN/wandb/``). The final figures go to the run's summary; files and checkpoints are
    artifacts (``run-files-<id>``, ``model-<id>``)."""

    name = "wandb"

    def _start(self) -> None:
        import wandb

        settings, kept = self.config.log.wandb, kept_run(self.run_dir, self.name)
        if os.environ.get("WANDB_DIR"):  # W&B writes there but warns where it does not exist yet
            Path(os.environ["WANDB_DIR"]).mkdir(parents=True, exist_ok=True)
        timeout = float(os.environ.get("WANDB_INIT_TIMEOUT", 30))  # online without a network: not W&B's 90 s
        self.run = wandb.init(
            project=settings.project or os.environ.get("WANDB_PROJECT") or self.config.name,
            entity=settings.entity or None,  # None: WANDB_ENTITY, else the account's default
            name=os.environ.get("WANDB_NAME") or self.run_dir.name,
            id=kept["run_id"] if kept else None,
            resume="allow" if kept else None,
            dir=None if os.environ.get("WANDB_DIR") else str(self.run_dir),
            tags=[f"{k}:{v}"[:64] for k, v in tags(self.config).items()],
            settings=wandb.Settings(silent=True, console="off", init_timeout=timeout),
            reinit="create_new",  # a run the user's own code holds in this process stays theirs
        )
        self.run.config.update(params(self.config), allow_val_change=True)  # a resume may change train.epochs
        keep_run(self.run_dir, self.name, {"run_id": self.run.id, "project": self.run.project})

    def _log(self, step: int, values: dict[str, float]) -> None:
        if any(k.startswith("final/") for k in values):
            self.run.summary.update(values)
        else:
            self.run.log(dict(values), step=step)

    def _checkpoint(self, path: Path, step: int) -> None:
        import wandb

        artifact = wandb.Artifact(f"model-{self.run.id}", type="model", metadata={"epoch": step})
        artifact.add_file(str(path), name=path.name)
        self.run.log_artifact(artifact, aliases=[f"epoch-{step}"])

    def _finish(self, run_dir: Path, results: dict) -> None:
        import wandb

        self.run.summary.update(results_metrics(results))
        with run_files(run_dir, self.config.log.model) as sent:
            folder = wandb.Artifact(f"run-files-{self.run.id}", type="run-folder")
            for path in (p for p in sent if p.suffix != ".pt"):
                folder.add_file(str(path), name=path.name)
            self.run.log_artifact(folder)
            checkpoints = [p for p in sent if p.suffix == ".pt"]
            if checkpoints:
                model = wandb.Artifact(
                    f"model-{self.run.id}", type="model", metadata={"epoch": len(results["history"])}
                )
                for path in checkpoints:
                    model.add_file(str(path), name=path.name)
                self.run.log_artifact(model, aliases=["latest"])

    def _close(self) -> None:
        self.run.finish(exit_code=0 if self.finished else 1)
