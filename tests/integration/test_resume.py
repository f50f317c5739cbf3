"""Checkpoints as a user meets them, through the CLI: a job killed outright and resumed, a
finished run extended, early stopping, evaluate / predict, and checkpoints that must be refused.

Equality here is exact (``==`` on floats, ``torch.equal`` on weights): a resumed run must be the
very same run, not a close one. Every run uses one thread per rank (see test_launch_modes)."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import yaml
from helpers import gnnbridge, hooked_env, in_process, ok, one_line, start

from gnnbridge.core.inference import checkpoint
from gnnbridge.testing.ports import free_port

pytestmark = pytest.mark.slow
SMALL = ["--quiet", "--set", "dataset.options.num_nodes=800", "--set", "train.batch_size=64"]
GIN = ["gin-synthetic", "--quiet", "--set", "dataset.options.num_graphs=120", "--set", "train.batch_size=16"]

# Preemption, deterministically: every process of the job imports this (PYTHONPATH), and rank 0
# SIGKILLs the whole job (launcher included) right after its second latest.pt is on disk.
PREEMPT = textwrap.dedent("""
    import os, signal
    import gnnbridge.core.inference.checkpoint as ckpt

    _save, _count = ckpt.save, [0]

    def save(path, payload):
        _save(path, payload)
        if path.name == "latest.pt":
            _count[0] += 1
            if _count[0] == 2:
                os.killpg(os.getpgid(0), signal.SIGKILL)

    ckpt.save = save
""")


# A rank that dies on its own: rank 1 is SIGKILLed as its second epoch starts, after the first
# checkpoint (the barrier after a checkpoint lets no rank start the next epoch before it is on disk).
RANK_DIES = textwrap.dedent("""
    import os, signal
    from gnnbridge.core.training.trainer import Trainer

    _train_epoch = Trainer.train_epoch

    def train_epoch(self, epoch):
        if epoch == 1 and self.ctx.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return _train_epoch(self, epoch)

    Trainer.train_epoch = train_epoch
""")


def results(run):
    return json.loads((run / "results.json").read_text())


def weights(run, kind="latest"):
    return checkpoint.load(checkpoint.path_in(run, kind))["model"]


def assert_same_run(a, b):
    """Byte-identical metrics and losses, and equal final weights."""
    ra, rb = results(a), results(b)
    assert json.dumps(ra["metrics"]) == json.dumps(rb["metrics"])
    assert json.dumps(ra["best"]) == json.dumps(rb["best"])
    assert json.dumps(ra["last"]) == json.dumps(rb["last"])
    assert [h["loss"] for h in ra["history"]] == [h["loss"] for h in rb["history"]]
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """4-epoch runs on 2 ranks, one per backend (and a graph task), computed once."""
    root = tmp_path_factory.mktemp("full")
    runs = {}
    for name, args in {
        "pyg": ["--backend", "pyg", *SMALL],
        "dgl": ["--backend", "dgl", *SMALL],
        "gin": ["--backend", "pyg", *GIN],
    }.items():
        ok(gnnbridge("train", *args, "--nproc", "2", "--set", "train.epochs=4", "--out", f"{name}", cwd=root))
        runs[name] = root / name
    return runs


@pytest.mark.parametrize("backend", ["pyg", "dgl"])
def test_a_job_killed_after_its_second_checkpoint_resumes_to_identical_results(tmp_path, uninterrupted, backend):
    args = ("train", "--backend", backend, *SMALL, "--nproc", "2", "--set", "train.epochs=4", "--out", "run")
    proc = start(*args, cwd=tmp_path, env=hooked_env(tmp_path, PREEMPT), new_session=True)  # PREEMPT kills the group
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, err
    run = tmp_path / "run"
    assert not (run / "results.json").exists()
    assert checkpoint.load(checkpoint.path_in(run, "latest"))["epoch"] == 1  # two epochs done
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]  # no half-written file

    resumed = ok(gnnbridge("train", "--resume", "run", "--quiet", cwd=tmp_path))
    assert "results: run/results.json" in resumed.stdout
    assert results(run)["resumed_from"] == {"epoch": 1, "world_size": 2}
    assert_same_run(run, uninterrupted[backend])


def test_a_failed_job_keeps_its_checkpoint_and_says_how_to_resume(tmp_path, uninterrupted):
    proc = gnnbridge(
        "train",
        "--backend",
        "pyg",
        *SMALL,
        "--nproc",
        "2",
        "--set",
        "train.epochs=4",
        "--out",
        "run",
        cwd=tmp_path,
        env=hooked_env(tmp_path, RANK_DIES),
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert re.fullmatch(
        rf"Error: {DIED}\. The run's checkpoint is kept; continue it with: gnnbridge train "
        r"--resume run",
        lines[0],
    ), lines[0]
    assert checkpoint.load(checkpoint.path_in(tmp_path / "run", "latest"))["epoch"] == 0
    ok(gnnbridge("train", "--resume", "run", "--quiet", cwd=tmp_path))
    assert_same_run(tmp_path / "run", uninterrupted["pyg"])


SCHEDULED = [
    *("--set", "train.optimizer=sgd", "--set", "train.momentum=0.9", "--set", "train.lr=0.05"),
    *("--set", "train.schedule=cosine", "--set", "train.warmup_epochs=1", "--set", "train.epochs=4"),
]


def test_a_killed_run_with_a_schedule_resumes_to_identical_results_and_learning_rates(tmp_path):
    """SGD with momentum, warm-up then cosine: the schedule's state is checkpointed with the
    optimizer's, so the resumed epochs train at the rates (and reach the losses) of the run
    that never stopped."""
    ok(gnnbridge("train", "--backend", "pyg", *SMALL, *SCHEDULED, "--out", "full", cwd=tmp_path))
    args = ("train", "--backend", "pyg", *SMALL, *SCHEDULED, "--out", "run")
    proc = start(*args, cwd=tmp_path, env=hooked_env(tmp_path, PREEMPT), new_session=True)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, err
    saved = checkpoint.load(checkpoint.path_in(tmp_path / "run", "latest"))
    assert saved["epoch"] == 1 and saved["scheduler"]["last_epoch"] == 2
    ok(gnnbridge("train", "--resume", "run", "--quiet", cwd=tmp_path))
    assert_same_run(tmp_path / "run", tmp_path / "full")
    rates = [h["lr"] for h in results(tmp_path / "run")["history"]]
    assert rates == [h["lr"] for h in results(tmp_path / "full")["history"]]
    assert rates[0] == 0.025 and rates[1] == 0.05 and rates[1] > rates[2] > rates[3]


@pytest.mark.parametrize(
    "change, needle",
    [
        ("train.optimizer=sgd", "train.optimizer='sgd' differs from the checkpoint's 'adam', but --resume keeps"),
        # the seed draws the split of a dataset that gives none: another would train on test nodes
        ("train.seed=1", "train.seed=1 differs from the checkpoint's 0, but --resume keeps"),
    ],
)
def test_resume_keeps_what_makes_it_the_same_run(tmp_path, uninterrupted, change, needle):
    one_line(in_process("train", "--resume", str(uninterrupted["pyg"]), "--set", change, cwd=tmp_path), needle)


@pytest.mark.parametrize("name, args", [("dgl", ["--backend", "dgl", *SMALL]), ("gin", ["--backend", "pyg", *GIN])])
def test_a_finished_run_extended_equals_the_longer_run(tmp_path, uninterrupted, name, args):
    ok(gnnbridge("train", *args, "--nproc", "2", "--set", "train.epochs=2", "--out", "run", cwd=tmp_path))
    first = results(tmp_path / "run")
    ok(gnnbridge("train", "--resume", "run", "--set", "train.epochs=4", "--quiet", cwd=tmp_path))
    assert_same_run(tmp_path / "run", uninterrupted[name])
    # The shorter run's results are kept beside the new ones, never overwritten.
    assert json.loads((tmp_path / "run" / "results.epochs-2.json").read_text()) == first


def test_a_two_rank_checkpoint_resumes_on_one_rank(tmp_path, uninterrupted):
    shutil.copytree(uninterrupted["pyg"], tmp_path / "run")
    ok(in_process("train", "--resume", "run", "--nproc", "1", "--set", "train.epochs=5", "--quiet", cwd=tmp_path))
    after, before = results(tmp_path / "run"), results(uninterrupted["pyg"])
    assert after["world_size"] == 1 and after["resumed_from"] == {"epoch": 3, "world_size": 2}
    assert len(after["history"]) == 5 and after["history"][:4] == before["history"]
    # It continued from the trained weights: its epoch's loss is far below a fresh model's.
    assert after["history"][4]["loss"] < 0.8 * before["history"][0]["loss"]
    assert after["metrics"]["test_acc"] > 0.5


def test_same_seed_same_metrics_on_both_backends(tmp_path):
    for backend in ("pyg", "dgl"):
        for run in ("a", "b"):
            ok(
                in_process(
                    "train",
                    "--backend",
                    backend,
                    *SMALL,
                    "--set",
                    "train.epochs=2",
                    "--out",
                    f"{backend}-{run}",
                    cwd=tmp_path,
                )
            )
        a, b = results(tmp_path / f"{backend}-a"), results(tmp_path / f"{backend}-b")
        assert json.dumps(a["metrics"]) == json.dumps(b["metrics"])
        assert [h["loss"] for h in a["history"]] == [h["loss"] for h in b["history"]]


def test_early_stopping_stops_records_and_resumes_only_with_more_patience(tmp_path):
    # A learning rate too small to move val_acc: every epoch after the first is a tie.
    args = ["--set", "train.lr=1e-12", "--set", "train.epochs=10", "--set", "train.patience=2"]
    proc = ok(in_process("train", *SMALL, *args, "--out", "run", cwd=tmp_path))
    assert "stopped early after epoch 3 (train.patience=2)" in proc.stdout
    res = results(tmp_path / "run")
    assert res["early_stopping"] == {"patience": 2, "stopped": True, "stopped_after_epoch": 2}
    assert res["epochs_trained"] == 3 and res["best"]["epoch"] == 0

    again = in_process("train", "--resume", "run", cwd=tmp_path)
    assert again.returncode == 1 and again.stderr.strip().splitlines() == [
        (
            "Error: Run 'run' stopped early after 3 epoch(s): val_acc did not improve for 2 epoch(s) "
            "(train.patience=2); continue with a larger train.patience, or 0 to turn early stopping off."
        )
    ]
    ok(in_process("train", "--resume", "run", "--set", "train.patience=3", "--quiet", cwd=tmp_path))
    assert results(tmp_path / "run")["epochs_trained"] == 4


def test_evaluate_and_predict_from_a_run_folder_or_a_checkpoint_file(tmp_path, uninterrupted):
    for backend in ("dgl", "pyg"):  # each on the backend it was trained with
        run = uninterrupted[backend]
        report = json.loads(ok(in_process("evaluate", str(run), "--json", cwd=tmp_path)).stdout)
        best = results(run)["best"]
        assert report["backend"] == backend and report["epoch"] == best["epoch"]
        assert report["checkpoint"].endswith("best.pt")
        assert report["metrics"] == pytest.approx(best["metrics"])
        # one result: what results.json reports is what the checkpoint every later command uses gives
        assert report["metrics"] == pytest.approx(results(run)["metrics"])
        last = json.loads(ok(in_process("evaluate", str(run), "--checkpoint", "latest", "--json", cwd=tmp_path)).stdout)
        assert last["metrics"] == pytest.approx(results(run)["last"]["metrics"])

    latest = ok(in_process("evaluate", str(run / "checkpoints" / "latest.pt"), cwd=tmp_path)).stdout
    assert "(epoch 4, sage-synthetic on pyg): val_acc " in latest

    ok(in_process("predict", str(run), "--out", "preds.npz", cwd=tmp_path))
    with np.load(tmp_path / "preds.npz") as preds:
        assert preds["probs"].shape == (800, 8) and preds["probs"].dtype == np.float32
        assert np.allclose(preds["probs"].sum(1), 1, atol=1e-5)
        test = preds["test_idx"]
        assert (preds["pred"][test] == preds["y"][test]).mean() == pytest.approx(report["metrics"]["test_acc"])


def npz_members(path):
    """Each member's name and bytes, in order (the zip's timestamps aside)."""
    import zipfile

    with zipfile.ZipFile(path) as z:
        return [(i.filename, z.read(i.filename)) for i in z.infolist()]


def test_layers_on_disk_evaluate_and_predict_as_in_memory(tmp_path, uninterrupted):
    """eval.layer_store=disk (forced on a small graph) scores and predicts exactly as layers in
    memory (to float tolerance), and predict's streamed file holds what numpy.savez writes, byte for byte."""
    run = uninterrupted["dgl"]
    scores = {
        store: json.loads(
            ok(in_process("evaluate", str(run), "--json", "--set", f"eval.layer_store={store}", cwd=tmp_path)).stdout
        )["metrics"]
        for store in ("memory", "disk")
    }
    assert scores["disk"] == pytest.approx(scores["memory"], abs=1e-6)
    for store in ("memory", "disk"):
        ok(in_process("predict", str(run), "--out", f"{store}.npz", "--set", f"eval.layer_store={store}", cwd=tmp_path))
    with np.load(tmp_path / "disk.npz") as preds, np.load(tmp_path / "memory.npz") as in_memory:
        arrays = {k: preds[k] for k in preds.files}
        # The same predictions; the scores to float tolerance (a layer read back from its file is
        # gathered row by row, one in RAM may be read in place: another summation order).
        assert preds.files == in_memory.files and (preds["pred"] == in_memory["pred"]).all()
        for key in ("logits", "probs"):
            np.testing.assert_allclose(preds[key], in_memory[key], rtol=1e-5, atol=1e-5)
    np.savez(tmp_path / "savez.npz", **arrays)
    assert npz_members(tmp_path / "disk.npz") == npz_members(tmp_path / "savez.npz")
    assert list(arrays) == ["logits", "probs", "pred", "y", "train_idx", "val_idx", "test_idx"]


def test_predict_for_a_graph_task_scores_every_graph(tmp_path, uninterrupted):
    ok(in_process("predict", str(uninterrupted["gin"]), "--checkpoint", "latest", "--out", "g.npz", cwd=tmp_path))
    with np.load(tmp_path / "g.npz") as preds:
        assert preds["logits"].shape == (120, 3) and preds["y"].shape == (120,)


def test_predict_never_overwrites_and_wants_npz(tmp_path, uninterrupted):
    (tmp_path / "preds.npz").write_text("mine")
    one_line(in_process("predict", str(uninterrupted["pyg"]), "--out", "preds.npz", cwd=tmp_path), "already exists")
    assert (tmp_path / "preds.npz").read_text() == "mine"
    one_line(in_process("predict", str(uninterrupted["pyg"]), "--out", "preds.csv", cwd=tmp_path), "use --out FILE.npz")
    assert sorted(os.listdir(tmp_path)) == ["preds.npz"]


def snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--set", "model.hidden=128"], "model.hidden=128 differs from the checkpoint's 64, but --resume keeps"),
        (["--backend", "dgl"], "backend='dgl' differs from the checkpoint's 'pyg'"),
        (["--set", "dataset.options.num_nodes=900"], "dataset.options.num_nodes=900 differs"),
        ([], "has already trained 4 epoch(s) and train.epochs=4; extend it with --set train.epochs=N"),
        (["--set", "train.epochs=2"], "extend it with --set train.epochs=N for some N > 4"),
        (["sage-synthetic"], "drop EXPERIMENT"),
        (["--set", "train.epochz=9"], "did you mean 'epochs'"),
    ],
)
def test_resume_refuses_what_would_not_continue_the_run(tmp_path, uninterrupted, args, needle):
    run = uninterrupted["pyg"]
    before = snapshot(run)
    one_line(in_process("train", "--resume", str(run), *args, cwd=tmp_path), needle)
    assert snapshot(run) == before


def test_unusable_checkpoints_are_refused_and_nothing_runs_or_changes(tmp_path, uninterrupted):
    run = tmp_path / "run"
    shutil.copytree(uninterrupted["pyg"], run)
    latest = checkpoint.path_in(run, "latest")
    latest.write_bytes(latest.read_bytes()[:5000])  # truncated by a crash outside gnnbridge
    before = snapshot(run)
    one_line(in_process("train", "--resume", "run", "--set", "train.epochs=9", cwd=tmp_path), "latest.pt' is corrupt")
    assert snapshot(run) == before

    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    torch.save({"format": checkpoint.FORMAT, "model": Evil(marker)}, evil)
    for command in (["evaluate", "evil.pt"], ["predict", "evil.pt", "--out", "p.npz"]):
        one_line(in_process(*command, cwd=tmp_path), "carries pickled code (posix.system) and was refused")
    assert not marker.exists() and not (tmp_path / "p.npz").exists()

    state = checkpoint.load(checkpoint.path_in(uninterrupted["pyg"], "best"))
    state["config"]["model"]["hidden"] = 32  # the model code or config changed since it was saved
    torch.save(state, tmp_path / "other.pt")
    one_line(in_process("evaluate", "other.pt", cwd=tmp_path), "was made by a different model")
    one_line(
        in_process("evaluate", "run", "--set", "model.hidden=32", cwd=tmp_path),
        "model.hidden=32 differs from the checkpoint's 64, but evaluate keeps task, backend, model as trained",
    )
    one_line(in_process("train", "--resume", "nowhere", cwd=tmp_path), "Run folder 'nowhere' does not exist")


class Evil:
    """Runs a command when unpickled, as a malicious checkpoint would."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def graph_npz(path, n=300, features=8, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n).astype(np.int64)
    edges = rng.integers(0, n, (2, 4 * n)).astype(np.int64)
    x = (rng.normal(size=(n, features)) + np.eye(3, features)[y]).astype(np.float32)
    np.savez(path, edge_index=edges, x=x, y=y)


def test_data_that_moved_is_pointed_at_and_must_fit_the_model(tmp_path):
    graph_npz(tmp_path / "graph.npz")
    ok(
        in_process(
            "train", "--dataset", "graph.npz", "--quiet", "--set", "train.epochs=1", "--out", "run", cwd=tmp_path
        )
    )
    (tmp_path / "graph.npz").rename(tmp_path / "moved.npz")
    one_line(in_process("evaluate", "run", cwd=tmp_path), "graph.npz' does not exist")
    moved = json.loads(
        ok(in_process("evaluate", "run", "--json", "--set", "dataset.path=moved.npz", cwd=tmp_path)).stdout
    )
    assert moved["metrics"] == pytest.approx(results(tmp_path / "run")["best"]["metrics"])
    # Sampled inference (eval.* may change) scores every node through the training sampler; with
    # fanouts of 10 and in-degrees near 4 it sees almost every neighbour, so it agrees with exact
    # layer-wise inference.
    for out, mode in (("s.npz", "sampled"), ("l.npz", "layerwise")):
        ok(
            in_process(
                "predict",
                "run",
                "--out",
                out,
                "--set",
                "dataset.path=moved.npz",
                "--set",
                f"eval.mode={mode}",
                cwd=tmp_path,
            )
        )
    with np.load(tmp_path / "s.npz") as sampled, np.load(tmp_path / "l.npz") as exact:
        assert sampled["logits"].shape == exact["logits"].shape == (300, 3)
        assert (sampled["pred"] == exact["pred"]).mean() > 0.9
    graph_npz(tmp_path / "wider.npz", features=12)
    one_line(
        in_process("predict", "run", "--out", "p.npz", "--set", "dataset.path=wider.npz", cwd=tmp_path),
        "The dataset has num_features=12 but the model in",
    )
    assert not (tmp_path / "p.npz").exists()


def test_a_run_whose_data_moved_resumes_from_its_new_place_and_only_on_that_data(tmp_path):
    graph_npz(tmp_path / "graph.npz")
    ok(
        in_process(
            "train", "--dataset", "graph.npz", "--quiet", "--set", "train.epochs=1", "--out", "run", cwd=tmp_path
        )
    )
    (tmp_path / "data").mkdir()
    (tmp_path / "graph.npz").rename(tmp_path / "data" / "graph.npz")
    graph_npz(tmp_path / "other.npz", seed=1)  # the same shapes but for the edges: other data
    np.savez(
        tmp_path / "other.npz",
        **{**np.load(tmp_path / "other.npz"), "edge_index": np.load(tmp_path / "other.npz")["edge_index"][:, :900]},
    )
    before = snapshot(tmp_path / "run")
    resume = ["train", "--resume", "run", "--quiet", "--set", "train.epochs=2"]
    one_line(
        in_process(*resume, cwd=tmp_path),
        "graph.npz' does not exist; give an existing .npz (a run or checkpoint "
        "whose data moved: --set dataset.path=NEW)",
    )
    one_line(
        in_process(*resume, "--set", "dataset.path=other.npz", cwd=tmp_path),
        "has num_edges=900 but run 'run' was trained on num_edges=1200: it is not the data the run continues on",
    )
    assert snapshot(tmp_path / "run") == before
    ok(in_process(*resume, "--set", "dataset.path=data/graph.npz", cwd=tmp_path))
    assert [h["epoch"] for h in results(tmp_path / "run")["history"]] == [0, 1]
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["dataset"]["path"].endswith("data/graph.npz")


# --------------------------------------------------------------------------- restarts that resume

# Rank 1 SIGKILLs itself as its third epoch starts, after two checkpoints (or as epoch KILL_AT_EPOCH
# starts); on the first attempt only, or on every attempt (so the restarts run out).
RANK_DIES_ON_ATTEMPTS = textwrap.dedent("""
    import os, signal
    from gnnbridge.core.training.trainer import Trainer

    _train_epoch = Trainer.train_epoch

    def train_epoch(self, epoch):
        every = os.environ.get("KILL_EVERY_ATTEMPT") == "1"
        at = int(os.environ.get("KILL_AT_EPOCH", "2"))
        if epoch == at and self.ctx.rank == 1 and (every or self.ctx.attempt == 0):
            os.kill(os.getpid(), signal.SIGKILL)
        return _train_epoch(self, epoch)

    Trainer.train_epoch = train_epoch
""")
# A SIGKILLed rank is named by whoever notices first: the elastic agent (its signal) or the
# surviving rank's watchdog (it sees the death, not the cause). Both lines are right; which one
# comes is a race, more often won by the watchdog when the machine is busy.
DIED = (
    r"rank 1 (\(pid \d+\) was killed by SIGKILL|\(pid \d+ on .*\) died without a Python error \(killed by a signal "
    r"or the out-of-memory killer\?\))"
)
RESTART_LINE = rf"Restart 1 of 1 after: {DIED}; continuing run from epoch 3\."


def test_a_killed_rank_is_restarted_and_the_run_ends_as_if_uninterrupted(tmp_path, uninterrupted):
    env = hooked_env(tmp_path, RANK_DIES_ON_ATTEMPTS)
    proc = ok(
        gnnbridge(
            "train",
            "--backend",
            "pyg",
            *SMALL,
            "--nproc",
            "2",
            "--set",
            "train.epochs=4",
            "--max-restarts",
            "1",
            "--out",
            "run",
            cwd=tmp_path,
            env=env,
        )
    )
    assert re.fullmatch(RESTART_LINE, proc.stderr.strip()), proc.stderr  # said once, and no error line
    run = results(tmp_path / "run")
    assert run["restarts"] == [{"attempt": 1, "after": run["restarts"][0]["after"], "resumed_from_epoch": 1}]
    assert "rank 1 (pid" in run["restarts"][0]["after"]
    assert_same_run(tmp_path / "run", uninterrupted["pyg"])
    assert results(uninterrupted["pyg"])["restarts"] == []


def test_without_restarts_left_the_job_fails_as_before_and_resumes_by_hand(tmp_path, uninterrupted):
    env = hooked_env(tmp_path, RANK_DIES_ON_ATTEMPTS, KILL_EVERY_ATTEMPT="1")
    proc = gnnbridge(
        "train",
        "--backend",
        "pyg",
        *SMALL,
        "--nproc",
        "2",
        "--set",
        "train.epochs=4",
        "--max-restarts",
        "1",
        "--out",
        "run",
        cwd=tmp_path,
        env=env,
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert proc.returncode == 1 and len(errors) == 1, proc.stderr
    assert re.fullmatch(
        rf"Error: {DIED}\. The run's checkpoint is kept; continue it with: gnnbridge train "
        r"--resume run",
        errors[0],
    ), errors[0]
    assert not (tmp_path / "run" / "results.json").exists()
    ok(gnnbridge("train", "--resume", "run", "--quiet", cwd=tmp_path))
    assert_same_run(tmp_path / "run", uninterrupted["pyg"])
    assert results(tmp_path / "run")["resumed_from"] == {"epoch": 1, "world_size": 2}


@pytest.mark.parametrize("kill_at, resumed_from", [(2, 1), (0, None)])
def test_torchrun_restarts_continue_the_run_folder_the_first_attempt_chose(
    tmp_path, uninterrupted, kill_at, resumed_from
):
    """No --out: the restarted ranks find the generated folder through the job's store, also when
    the first attempt died before its first checkpoint (then they train it again from epoch 0)."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc-per-node",
        "2",
        "--max-restarts",
        "1",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(port),
        "-m",
        "gnnbridge",
        "train",
        "--backend",
        "pyg",
        *SMALL,
        "--set",
        "train.epochs=4",
    ]
    env = hooked_env(tmp_path, RANK_DIES_ON_ATTEMPTS, KILL_AT_EPOCH=str(kill_at))
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, cwd=tmp_path, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    (folder,) = (tmp_path / "runs").iterdir()
    assert [r["resumed_from_epoch"] for r in results(folder)["restarts"]] == [resumed_from]
    assert_same_run(folder, uninterrupted["pyg"])


# --------------------------------------------------------------------------- inside an epoch

# Rank 1 SIGKILLs itself as it is about to train its KILL_AT_STEP-th batch of the run (counting
# from 1 over all epochs), on the first attempt only, or on every attempt.
RANK_DIES_INSIDE_AN_EPOCH = textwrap.dedent("""
    import os, signal
    from gnnbridge.core.training.trainer import Trainer

    _train_step, _count = Trainer.train_step, [0]

    def train_step(self, *args, **kwargs):
        _count[0] += 1
        every = os.environ.get("KILL_EVERY_ATTEMPT") == "1"
        if _count[0] == int(os.environ["KILL_AT_STEP"]) and self.ctx.rank == 1 and (every or self.ctx.attempt == 0):
            os.kill(os.getpid(), signal.SIGKILL)
        return _train_step(self, *args, **kwargs)

    Trainer.train_step = train_step
""")
INSIDE = [
    "--backend",
    "pyg",
    *SMALL,
    "--nproc",
    "2",
    "--set",
    "train.epochs=4",
    "--set",
    "train.checkpoint_every_batches=2",
]


def test_a_restart_continues_inside_the_epoch_and_ends_as_if_uninterrupted(tmp_path, uninterrupted):
    """train.checkpoint_every_batches=2 on epochs of 4 batches a rank: killed before the 4th batch
    of epoch 3, the restart continues after that epoch's batch 2 (not from its start), and the
    run's losses, metrics and weights are the uninterrupted run's, whose checkpoints came only
    at epoch ends: the mid-epoch checkpoints change nothing either."""
    assert [h["batches"] for h in results(uninterrupted["pyg"])["history"]] == [4] * 4
    env = hooked_env(tmp_path, RANK_DIES_INSIDE_AN_EPOCH, KILL_AT_STEP=str(2 * 4 + 4))
    proc = ok(gnnbridge("train", *INSIDE, "--max-restarts", "1", "--out", "run", cwd=tmp_path, env=env))
    assert re.fullmatch(
        rf"Restart 1 of 1 after: {DIED}; continuing run from epoch 3, after its batch 2\.", proc.stderr.strip()
    ), proc.stderr
    run = results(tmp_path / "run")
    assert run["restarts"][0]["resumed_from_epoch"] == 1 and run["restarts"][0]["inside"] == {"epoch": 2, "batches": 2}
    assert [h.get("resumed_after_batch") for h in run["history"]] == [None, None, 2, None]
    assert_same_run(tmp_path / "run", uninterrupted["pyg"])


def test_a_run_stopped_inside_its_first_epoch_resumes_there_by_hand(tmp_path, uninterrupted):
    """Killed before the 3rd batch of the first epoch, with no restarts left: latest.pt is the
    checkpoint after batch 2 (no epoch finished yet), and --resume continues it from there; on
    one rank instead of two, it says the epoch starts again and does so."""
    env = hooked_env(tmp_path, RANK_DIES_INSIDE_AN_EPOCH, KILL_AT_STEP="3", KILL_EVERY_ATTEMPT="1")
    proc = gnnbridge("train", *INSIDE, "--out", "run", cwd=tmp_path, env=env)
    assert proc.returncode == 1 and not (tmp_path / "run" / "results.json").exists(), proc.stderr
    state = checkpoint.load(checkpoint.path_in(tmp_path / "run", checkpoint.LATEST))
    assert (state["epoch"], state["history"], state["mid_epoch"]["batches"]) == (-1, [], 2)
    shutil.copytree(tmp_path / "run", tmp_path / "one")  # on one rank the position means nothing
    proc = ok(gnnbridge("train", "--resume", "one", "--quiet", "--nproc", "1", cwd=tmp_path))
    assert proc.stderr.strip() == (
        "The checkpoint stopped 2 batches into epoch 1 with 2 rank(s); with 1 that epoch starts again from its "
        "first batch."
    )
    assert [h.get("resumed_after_batch") for h in results(tmp_path / "one")["history"]] == [None] * 4
    ok(gnnbridge("train", "--resume", "run", "--quiet", cwd=tmp_path))
    assert results(tmp_path / "run")["resumed_from"] == {
        "epoch": -1,
        "world_size": 2,
        "inside": {"epoch": 0, "batches": 2},
    }
    assert_same_run(tmp_path / "run", uninterrupted["pyg"])


# The monitor peaks at epoch BEST_EPOCH (0-based) and falls after it: a run stopped later must take
# its best weights from best.pt, since latest.pt holds other ones.
MONITOR_PEAKS = textwrap.dedent("""
    import os
    from gnnbridge.core.training.state import TrainState

    _record = TrainState.record

    def record(self, stats, monitor, *order):
        stats[monitor] = 1.0 - 0.1 * abs(stats["epoch"] - int(os.environ["BEST_EPOCH"]))
        return _record(self, stats, monitor, *order)

    TrainState.record = record
""")


@pytest.mark.parametrize("best_epoch", [0, 1])
def test_a_restart_inside_an_epoch_keeps_an_earlier_best_epochs_weights(tmp_path, best_epoch):
    """Killed inside epoch 3, after a best epoch 1 (latest.pt is epoch 2's) or 2 (latest.pt is its
    end plus two batches): the restart reads the best weights from best.pt, and the run reports the
    same best metrics, and keeps the same best.pt, as an uninterrupted one."""
    for out, kill_at in (("whole", "0"), ("run", "12")):
        env = hooked_env(
            tmp_path, MONITOR_PEAKS + RANK_DIES_INSIDE_AN_EPOCH, BEST_EPOCH=str(best_epoch), KILL_AT_STEP=kill_at
        )
        ok(gnnbridge("train", *INSIDE, "--max-restarts", "1", "--out", out, cwd=tmp_path, env=env))
    run, whole = results(tmp_path / "run"), results(tmp_path / "whole")
    assert run["restarts"][0]["inside"] == {"epoch": 2, "batches": 2} and whole["best"]["epoch"] == best_epoch
    assert run["best"]["metrics"] is not None and run["best"]["metrics"] != run["last"]["metrics"]
    assert run["metrics"] == run["best"]["metrics"] and run["metrics_from"] == {
        "checkpoint": "best",
        "epoch": best_epoch,
    }
    assert_same_run(tmp_path / "run", tmp_path / "whole")
    best, again = weights(tmp_path / "whole", "best"), weights(tmp_path / "run", "best")
    assert all(torch.equal(best[k], again[k]) for k in best)
