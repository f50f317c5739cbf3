"""The tracking loggers against the real thing: ``log.to=[mlflow]`` against an ``mlflow server``
of this module's own (a SQLite store and an artifact folder in a temporary folder, on a free
port of 127.0.0.1, started once and stopped at the end whatever happened), read back through
``MlflowClient``; ``log.to=[wandb]`` with ``WANDB_MODE=offline``, its run file read record by
record. One-rank runs train in this process (:func:`helpers.in_process`: MLflow's client is
imported once); the two-rank run is a command line of its own."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import gnnbridge as cli
from helpers import in_process, ok, one_line, suite_env

import gnnbridge
from gnnbridge.core.training.loggers import flatten
from gnnbridge.testing import registered_plugin
from gnnbridge.testing.ports import free_port

mlflow = pytest.importorskip("mlflow")
SMALL = ["--quiet", "--set", "dataset.options.num_nodes=400", "--set", "train.batch_size=64"]
TRACKED = [*SMALL, "--set", "log.to=[mlflow]", "--set", "model.hidden=16"]
DEADLINE_S = 240  # a busy two-core machine took 26 s to bring the server up
SECRET = "s3cret-t0ken"


class Server:
    """``mlflow server`` with a SQLite store on a free port: ``start()`` to ``stop()``."""

    def __init__(self, root: Path):
        self.root, self.port = root, free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.log = root / "server.log"

    def start(self) -> None:
        exe = Path(sys.executable).with_name("mlflow")
        args = [str(exe), "server", "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
                "--artifacts-destination", str(self.root / "artifacts"), "--host", "127.0.0.1",
                "--port", str(self.port), "--workers", "1"]  # fmt: skip
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.wait()

    def wait(self) -> None:
        import requests

        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                if requests.get(f"{self.uri}/health", timeout=5).ok:
                    return
            except requests.RequestException:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"mlflow server did not come up on port {self.port}:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.5)

    def stop(self) -> None:
        """The server and the workers it started (its own process group, which it leads)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def client(self):
        return mlflow.MlflowClient(self.uri)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("mlflow"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def run_id(run: Path, name: str = "mlflow") -> str:
    return json.loads((run / "tracking" / f"{name}.json").read_text())["run_id"]


def results(run: Path) -> dict:
    return json.loads((run / "results.json").read_text())


def artifacts(client, rid: str, path: str | None = None) -> set[str]:
    found = set()
    for item in client.list_artifacts(rid, path):
        found |= artifacts(client, rid, item.path) if item.is_dir else {item.path}
    return found


def history_of(client, rid: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(rid, key))


def in_git_repo(folder: Path) -> str:
    """``folder`` as a git repository with one commit; returns the commit."""
    git = ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "experiment"], check=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def tracked(server, tmp_path_factory):
    """A run of 2 epochs with ``log.model=end`` tracked from a git repository, then resumed to 3."""
    root = tmp_path_factory.mktemp("tracked")
    commit = in_git_repo(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", server.uri)
        mp.setenv("MLFLOW_EXPERIMENT_NAME", "tracked")
        first = ok(in_process("train", *TRACKED, "--set", "train.epochs=2", "--set", "log.model=end", "--out", "run",
                              cwd=root))  # fmt: skip
        first_id, first_results = run_id(root / "run"), results(root / "run")
        resumed = ok(in_process("train", "--resume", "run", "--quiet", "--set", "train.epochs=3", cwd=root))
    assert first.stderr == resumed.stderr == ""  # nothing of MLflow's own on the way
    return {"run": root / "run", "commit": commit, "first_id": first_id, "first_results": first_results}


def test_a_tracked_run_holds_the_config_as_flat_params_and_what_it_ran_on_as_tags(server, tracked):
    run = server.client().get_run(run_id(tracked["run"]))
    params, tags = run.data.params, run.data.tags
    assert params["model.hidden"] == "16" and params["dataset.options.num_nodes"] == "400"
    assert params["log.to"] == "['mlflow']" and params["sampler.fanouts"] == "[10, 10]"
    assert tags["backend"] == "pyg" and tags["world_size"] == "1" and tags["mlflow.runName"] == "run"
    assert tags["versions.torch"] == results(tracked["run"])["versions"]["torch"]
    assert tags["git_commit"] == tracked["commit"]
    assert tags["changed_on_resume.train.epochs"] == "3"  # a param never changes in MLflow; the resume's is a tag


def test_each_epoch_is_a_point_equal_to_the_history_and_the_end_adds_final_best_and_last(server, tracked):
    client, rid, res = server.client(), run_id(tracked["run"]), results(tracked["run"])
    assert len(res["history"]) == 3
    for key in flatten(res["history"][0]):
        expected = [(h["epoch"] + 1, pytest.approx(flatten(h)[key], rel=1e-12)) for h in res["history"]]
        assert history_of(client, rid, key) == expected, key
    for key, value in res["metrics"].items():
        assert history_of(client, rid, f"final/{key}")[-1] == (3, pytest.approx(value, rel=1e-12))
    last, best = res["last"]["metrics"], res["best"]["metrics"]
    assert history_of(client, rid, "last/test_acc")[-1] == (3, pytest.approx(last["test_acc"], rel=1e-12))
    assert history_of(client, rid, "best/val_acc")[-1] == (3, pytest.approx(best["val_acc"], rel=1e-12))
    assert history_of(client, rid, "best_epoch")[-1] == (3, res["best"]["epoch"] + 1)
    assert history_of(client, rid, "final/test_acc")[0][0] == 2  # the first run's end, at its own last epoch


def test_a_resume_continues_the_same_run_and_the_files_and_checkpoints_are_its_artifacts(server, tracked, tmp_path):
    client, rid = server.client(), run_id(tracked["run"])
    assert rid == tracked["first_id"]
    experiment = client.get_experiment_by_name("tracked")
    assert [r.info.run_id for r in client.search_runs([experiment.experiment_id])] == [rid]  # one run, not two
    assert client.get_run(rid).info.status == "FINISHED"
    assert {"config.yaml", "results.json", "curves.png", "checkpoints/best.pt", "checkpoints/latest.pt"} <= artifacts(
        client, rid
    )
    got = client.download_artifacts(rid, "checkpoints/best.pt", str(tmp_path))
    assert Path(got).read_bytes() == (tracked["run"] / "checkpoints" / "best.pt").read_bytes()
    sent = json.loads(Path(client.download_artifacts(rid, "results.json", str(tmp_path))).read_text())
    assert sent["epochs_trained"] == 3 and sent == results(tracked["run"])


def test_log_model_all_on_dgl_keeps_every_checkpoint_and_no_password_is_sent(server, tmp_path):
    """``log.mlflow.*`` from the config; the URI typed with a password (the server ignores it)."""
    uri = server.uri.replace("http://", f"http://lab:{SECRET}@")
    sets = ["--set", f"log.mlflow.tracking_uri={uri}", "--set", "log.mlflow.experiment=lab-dgl", "--set",
            "log.mlflow.run_name=all-checkpoints", "--set", "log.model=all", "--set", "train.epochs=2"]  # fmt: skip
    proc = ok(in_process("train", *TRACKED, "--backend", "dgl", *sets, "--out", "run", cwd=tmp_path))
    assert SECRET not in proc.stdout + proc.stderr
    client, rid = server.client(), run_id(tmp_path / "run")
    run = client.get_run(rid)
    assert run.info.run_name == "all-checkpoints" and run.data.tags["backend"] == "dgl"
    assert client.get_experiment(run.info.experiment_id).name == "lab-dgl"
    assert {"checkpoints/epoch-1/latest.pt", "checkpoints/epoch-2/latest.pt", "checkpoints/best.pt"} <= artifacts(
        client, rid
    )
    assert run.data.params["log.mlflow.tracking_uri"] == server.uri.replace("http://", "http://lab:***@")
    kept = (tmp_path / "run" / "tracking" / "mlflow.json").read_text()
    sent = Path(client.download_artifacts(rid, "config.yaml", str(tmp_path / "got"))).read_text()
    texts = [*run.data.params.values(), *run.data.tags.values(), kept, sent]
    assert not [t for t in texts if SECRET in t]


def test_a_server_that_is_down_is_one_warning_and_a_resume_sends_every_epoch_it_missed(server, tmp_path, monkeypatch):
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("MLFLOW_TRACKING_URI", closed)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "was-down")
    proc = ok(in_process("train", *TRACKED, "--set", "train.epochs=2", "--out", "run", cwd=tmp_path))
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0] == (
        f"Warning: log.to=mlflow: this run is not tracked: {closed} does not answer (Connection refused); "
        "training goes on and the run folder keeps everything."
    )
    assert len(results(tmp_path / "run")["history"]) == 2 and not (tmp_path / "run" / "tracking").exists()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.uri)  # back up: the resume tracks the run whole
    ok(in_process("train", "--resume", "run", "--quiet", "--set", "train.epochs=3", cwd=tmp_path))
    client, rid, res = server.client(), run_id(tmp_path / "run"), results(tmp_path / "run")
    assert history_of(client, rid, "loss") == [(h["epoch"] + 1, pytest.approx(h["loss"])) for h in res["history"]]


class DeletesTheRun:
    """A lab's logger, listed after ``mlflow``, that deletes the tracked run on the server after
    epoch 1: from epoch 2 on the server refuses every write to it, as a server gone away would."""

    uri = ""

    class Logger:
        def __init__(self, run_dir, config):
            self.run_dir = run_dir

        def log(self, step, values):
            if step == 1:
                mlflow.MlflowClient(DeletesTheRun.uri).delete_run(run_id(self.run_dir))

        def close(self):
            pass

    @gnnbridge.hookimpl
    def register_loggers(self, register):
        register("deletes", self.Logger, "deletes the MLflow run after epoch 1")


def test_a_server_refusing_midway_is_one_warning_and_a_resume_sends_the_epochs_it_refused(server, tmp_path):
    DeletesTheRun.uri = server.uri
    sets = ["--set", f"log.mlflow.tracking_uri={server.uri}", "--set", "train.epochs=3"]
    with registered_plugin(DeletesTheRun(), "lab"):
        proc = ok(in_process("train", *SMALL, "--set", "log.to=[mlflow,deletes]", *sets, "--out", "run", cwd=tmp_path))
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Warning: log.to=mlflow: tracking stopped at epoch 2: "), lines
    assert lines[0].endswith("; training goes on and the run folder keeps everything.")
    assert len(results(tmp_path / "run")["history"]) == 3
    assert json.loads((tmp_path / "run" / "checkpoints" / "loggers.json").read_text()) == {"mlflow": 1, "deletes": 3}
    client, rid = server.client(), run_id(tmp_path / "run")
    assert [step for step, _ in history_of(client, rid, "loss")] == [1]
    client.restore_run(rid)  # the server takes writes again
    ok(in_process("train", "--resume", "run", "--quiet", "--set", "train.epochs=4", "--set", "log.to=[mlflow]",
                  cwd=tmp_path))  # fmt: skip
    res = results(tmp_path / "run")
    assert history_of(client, rid, "loss") == [(h["epoch"] + 1, pytest.approx(h["loss"])) for h in res["history"]]
    assert client.get_run(rid).info.status == "FINISHED"


@pytest.mark.slow
def test_two_ranks_track_one_run_from_rank_0(server, tmp_path):
    env = suite_env(MLFLOW_TRACKING_URI=server.uri, MLFLOW_EXPERIMENT_NAME="two-ranks")
    ok(cli("train", *TRACKED, "--nproc", "2", "--set", "train.epochs=2", "--out", "run", cwd=tmp_path, env=env))
    client = server.client()
    runs = client.search_runs([client.get_experiment_by_name("two-ranks").experiment_id])
    assert [r.info.run_id for r in runs] == [run_id(tmp_path / "run")]
    assert runs[0].data.tags["world_size"] == "2"
    assert [step for step, _ in history_of(client, runs[0].info.run_id, "loss")] == [1, 2]  # each epoch once


def test_the_tracking_keys_are_checked_before_anything_runs(refused, monkeypatch, tmp_path):
    one_line(refused("train", *SMALL, "--set", "log.to=[mlflow]", "--set", "log.model=maybe"),
             "log.model='maybe' is not a checkpoint policy; choose one of: false, end, all")  # fmt: skip
    one_line(refused("train", *SMALL, "--set", "log.mlflow.experiment=x"),
             "log.mlflow.experiment='x' applies to log.to=[mlflow] only")  # fmt: skip
    one_line(refused("train", *SMALL, "--set", "log.model=end"), "log.to is empty")
    import importlib.util

    find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else find(name, *a))
    one_line(refused("train", *SMALL, "--set", "log.to=[wandb]", "--out", "run"),
             "log.to=wandb needs the 'wandb' package, which is not installed: pip install wandb (or pip install "
             "'gnnbridge[track]')")  # fmt: skip
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------------- W&B, offline


def wandb_records(path: Path) -> list:
    """The records of a W&B run file (``run-ID.wandb``): LevelDB's log format (32 KiB blocks of
    chunks, each with a 7-byte header: CRC, length, type), after a 7-byte W&B header; each record
    a ``wandb_internal_pb2.Record``. Read here because wandb 0.31 ships no reader in Python."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:7]
    pos, block, records, parts = 7, 32768, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        parts += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            records.append(record)
            parts = b""
    return records


def offline_run(folder: Path) -> tuple[dict[int, dict], dict, set[str]]:
    """One offline run's history by step, summary and artifacts' files."""
    (path,) = folder.glob("run-*.wandb")
    history, summary, files = {}, {}, set()
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            history.setdefault(record.history.step.num, {}).update(row)
        elif kind == "summary":
            summary |= {item.key: json.loads(item.value_json) for item in record.summary.update if item.key}
        elif kind == "artifact":
            files |= {f"{record.artifact.name}/{entry.path}" for entry in record.artifact.manifest.contents}
    return history, summary, files


def test_wandb_offline_writes_its_run_and_a_resume_continues_its_id(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    for name in ("WANDB_API_KEY", "WANDB_ENTITY", "WANDB_PROJECT", "WANDB_NAME", "WANDB_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    for name in ("DIR", "CACHE_DIR", "DATA_DIR", "CONFIG_DIR"):  # nothing in the home folder
        monkeypatch.setenv(f"WANDB_{name}", str(tmp_path / "wandb-home" / name.lower()))
    sets = ["--set", "log.to=[wandb]", "--set", "log.wandb.project=lab", "--set", "log.model=end"]
    first = ok(in_process("train", *SMALL, *sets, "--set", "train.epochs=2", "--out", "run", cwd=tmp_path))
    ok(in_process("train", "--resume", "run", "--quiet", "--set", "train.epochs=3", cwd=tmp_path))
    assert first.stderr == ""
    rid, res = run_id(tmp_path / "run", "wandb"), results(tmp_path / "run")
    runs = sorted((tmp_path / "wandb-home" / "dir" / "wandb").glob(f"offline-run-*-{rid}"))
    assert len(runs) == 2  # the first start and the resume, one run id
    history, summary, files = offline_run(runs[0])
    assert sorted(history) == [1, 2]
    for h in res["history"][:2]:
        assert history[h["epoch"] + 1]["loss"] == pytest.approx(h["loss"], rel=1e-12)
        assert history[h["epoch"] + 1]["phases/forward"] == pytest.approx(h["phases"]["forward"], rel=1e-12)
    assert {f"run-files-{rid}/results.json", f"model-{rid}/best.pt"} <= files and "final/test_acc" in summary
    history, summary, _ = offline_run(runs[1])
    assert sorted(history) == [3] and summary["final/test_acc"] == pytest.approx(res["metrics"]["test_acc"])
