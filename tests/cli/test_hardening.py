"""Hostile and careless input, one class at a time (docs/guarantees.md).

Each test drives the real CLI (in this process where it can, so it is fast) or the real library
function, and asserts what a user would see: one ``Error:`` line naming the bad value, a
non-zero exit, nothing partial on disk, and memory bounded by the data rather than by a value.
"""

from __future__ import annotations

import errno
import io
import json
import multiprocessing
import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import gnnbridge, hooked_env, start, suite_env

from gnnbridge.core.errors import ConfigError, OutputExistsError, TrainingDivergedError

PY = sys.executable
# Karate's 20 training nodes in 3 batches: the default batch (256) makes every epoch one step,
# and train says so in a warning line before the first epoch, ahead of the one line a test awaits.
KARATE_STEPS = ("--set", "train.batch_size=8")


@pytest.fixture
def cli(capsys, monkeypatch, tmp_path):
    """The CLI in this process: returns (exit code, stdout, stderr)."""
    from gnnbridge.cli import main

    monkeypatch.chdir(tmp_path)

    def run(*args):
        code = 0
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code or 0
        seen = capsys.readouterr()
        return code, seen.out, seen.err

    return run


def one_error(result, *needles):
    code, _, err = result
    lines = err.strip().splitlines()
    assert code != 0, err
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    assert "unexpected" not in lines[0], lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def tiny_npz(path, n=40, classes=2, **overrides):
    rng = np.random.default_rng(0)
    y = (np.arange(n) % classes).astype(np.int64)
    src = rng.integers(0, n, 4 * n)
    arrays = {
        "edge_index": np.stack([src, rng.integers(0, n, 4 * n)]).astype(np.int64),
        "x": rng.normal(size=(n, 4)).astype(np.float32),
        "y": y,
    }
    arrays.update(overrides)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


def peak_rss_growth(fn) -> int:
    """How far this process's peak resident memory rose while ``fn`` ran, in bytes."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    fn()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024


# --------------------------------------------------------------------------- 1. one folder, one run


def _claim(path, barrier, results, done):
    from gnnbridge.core.app.rundir import make_run_dir

    barrier.wait()
    try:
        make_run_dir(Path(path), exclusive=False)
        results.put("won")
        done.wait(120)  # hold the folder until every other claim has been answered
    except OutputExistsError as exc:
        results.put(f"refused: {exc}")


def test_runs_started_at_the_same_instant_never_share_an_out_folder(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    barrier, results, done = ctx.Barrier(4), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_claim, args=(tmp_path / "out", barrier, results, done)) for _ in range(4)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    done.set()
    for p in procs:
        p.join(timeout=60)
    assert outcomes.count("won") == 1, outcomes
    assert all("in use by another gnnbridge run" in o or "not empty" in o for o in outcomes if o != "won")


def test_a_run_folder_in_use_refuses_resume_and_out(tmp_path, cli):
    folder = tmp_path / "busy"
    folder.mkdir()
    holder = subprocess.Popen(
        [
            PY,
            "-c",
            textwrap.dedent(f"""
        import fcntl, os, sys, time
        fd = os.open({str(folder / ".gnnbridge.lock")!r}, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("held", flush=True)
        time.sleep(3600)  # killed below, once the test is done
    """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        one_error(cli("train", "--dataset", "karate", "--out", folder), "in use by another gnnbridge run")
        (folder / "checkpoints").mkdir()
        one_error(cli("train", "--resume", folder), "has no checkpoints/latest.pt")
    finally:
        holder.kill()
    assert sorted(p.name for p in folder.iterdir()) == [".gnnbridge.lock", "checkpoints"]


def test_temporary_names_are_unique_and_a_stale_one_is_harmless(tmp_path):
    from gnnbridge.core import files
    from gnnbridge.core.inference import checkpoint

    target = tmp_path / "checkpoints" / "latest.pt"
    assert files.partial_name(target) != files.partial_name(target)
    target.parent.mkdir()
    (target.parent / ".latest.pt.partial").write_text("another writer's half file")
    checkpoint.save(target, {"w": torch.ones(2)})
    assert torch.equal(torch.load(target)["w"], torch.ones(2))
    assert (target.parent / ".latest.pt.partial").read_text() == "another writer's half file"


def _user_files(root):
    """A user's own files and folder outside any run folder, to plant links to."""
    root.mkdir()
    (root / "notes.csv").write_text("my notes\n")
    (root / "photo.png").write_bytes(b"my photo")
    (root / "board").mkdir()
    return root


def _tree(folder):
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


def test_a_run_folder_is_never_written_through_links(tmp_path, cli):
    run, user = tmp_path / "run", _user_files(tmp_path / "user")
    assert (
        cli(
            "train",
            "--dataset",
            "karate",
            "--set",
            "train.epochs=1",
            "--set",
            "log.to=[csv,tensorboard]",
            "--quiet",
            "--out",
            run,
        )[0]
        == 0
    )
    mine = _tree(user)
    # Links planted in the run folder, leading out of it: --resume refuses the folder, untouched.
    (run / "tensorboard").rename(run / "tensorboard-1")
    for name, target in (
        ("metrics.csv", user / "notes.csv"),
        ("curves.png", user / "photo.png"),
        ("tensorboard", user / "board"),
    ):
        (run / name).unlink(missing_ok=True)
        (run / name).symlink_to(target)
    before = {p.name: os.readlink(p) for p in run.iterdir() if p.is_symlink()}
    one_error(
        cli("train", "--resume", run, "--set", "train.epochs=2"),
        f"Run folder '{run}' holds a symbolic link that leads out of it: curves.png -> {user / 'photo.png'} "
        "(and 2 more)",
        "replace the link with a copy",
    )
    assert _tree(user) == mine and {p.name: os.readlink(p) for p in run.iterdir() if p.is_symlink()} == before
    assert cli("evaluate", run)[0] == 0 and _tree(user) == mine  # reading a run folder writes nothing
    # Hard links cannot be told from the run's own files: they are replaced, never written through.
    for name, target in (("metrics.csv", user / "notes.csv"), ("curves.png", user / "photo.png")):
        (run / name).unlink()
        os.link(target, run / name)
    (run / "tensorboard").unlink()
    assert cli("train", "--resume", run, "--set", "train.epochs=2", "--quiet")[0] == 0
    assert _tree(user) == mine
    assert (run / "metrics.csv").read_text().splitlines()[-1].startswith("2,")  # the new epoch's row
    assert (run / "curves.png").read_bytes().startswith(b"\x89PNG")
    assert not list(run.rglob("*.partial"))


def test_a_lock_file_planted_as_a_link_is_refused(tmp_path, cli):
    out, user = tmp_path / "out", _user_files(tmp_path / "user")
    out.mkdir()
    (out / ".gnnbridge.lock").symlink_to(user / "made-by-gnnbridge")
    one_error(cli("train", "--dataset", "karate", "--quiet", "--out", out), ".gnnbridge.lock' is a symbolic link")
    assert not (user / "made-by-gnnbridge").exists() and [p.name for p in out.iterdir()] == [".gnnbridge.lock"]


def test_a_folder_left_with_only_config_yaml_says_so(tmp_path, cli):
    (tmp_path / "dead").mkdir()
    (tmp_path / "dead" / "config.yaml").write_text("name: x\n")
    one_error(cli("train", "--out", tmp_path / "dead"), "killed before its first checkpoint")


# --------------------------------------------------------------------------- 2. bounded by the data


def test_one_huge_label_is_refused_without_a_billion_element_set(tmp_path, cli):
    path = tiny_npz(tmp_path / "g.npz", y=np.array([0, 1] * 19 + [0, 10**9], dtype=np.int64))
    growth = peak_rss_growth(lambda: one_error(cli("train", "--dataset", path), "labels up to 1000000000", "no 2"))
    assert growth < 500 * 2**20


def test_a_slurm_node_list_is_not_expanded_to_find_its_first_host():
    from gnnbridge.core.runtime.jobs import detect_job

    env = {
        "SLURM_PROCID": "0",
        "SLURM_STEP_ID": "0",
        "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_JOB_ID": "7",
        "SLURM_STEP_NODELIST": "n[00000000-99999999]",
    }
    growth = peak_rss_growth(lambda: detect_job(env))
    assert detect_job(env).master_addr == "n00000000"
    assert growth < 100 * 2**20


def test_a_model_that_cannot_fit_is_refused_before_it_is_allocated(cli):
    growth = peak_rss_growth(
        lambda: one_error(
            cli("train", "--dataset", "karate", "--set", "model.hidden=100000000"),
            "model.hidden=100000000",
            "parameters",
            "free",
        )
    )
    assert growth < 500 * 2**20


def test_layers_too_large_for_memory_are_refused_only_where_they_must_stay_in_memory(tmp_path, cli):
    """2**20 nodes x model.hidden=32768: layer-wise evaluation's layers (every node's input and
    output of a layer) are about a terabyte. By default they go to a temp file when they do not
    fit, so nothing refuses them; with eval.layer_store=memory they are refused in one line."""
    n = 2**20
    path = tmp_path / "wide.npz"
    np.savez(
        path,
        x=np.zeros((n, 1), np.float32),
        y=(np.arange(n) % 2).astype(np.int64),
        edge_index=np.stack([np.arange(100), np.arange(1, 101)]).astype(np.int64),
        train_idx=np.arange(8),
        val_idx=np.arange(8, 16),
        test_idx=np.arange(16, 24),
    )
    show = ("config", "show", "--dataset", path, "--set", "model.hidden=32768")
    one_error(
        cli(*show, "--set", "eval.layer_store=memory"),
        "eval.layer_store=memory",
        "1,048,576 nodes",
        "is free",
        "use --set eval.layer_store=auto",
    )
    code, out, err = cli(*show)
    assert code == 0, err
    assert "layer_store: auto" in out


def typed_npz(path, **arrays):
    """A small heterogeneous .npz: featureless users buy items (features, 3 labels); ``arrays`` add or replace."""
    rng = np.random.default_rng(0)
    base = {
        "num_nodes__user": np.array([30]),
        "x__item": rng.normal(size=(20, 4)).astype(np.float32),
        "y__item": (np.arange(20) % 3).astype(np.int64),
        "edge_index__user__buys__item": np.stack([np.repeat(np.arange(30), 4), rng.integers(0, 20, 120)]),
    }
    np.savez(path, **{k: v for k, v in {**base, **arrays}.items() if v is not None})
    return path


def test_a_node_count_in_a_heterogeneous_file_is_refused_before_it_is_allocated(tmp_path, cli):
    """10**9 featureless users are one number in the file; their records would be many GB."""
    path = typed_npz(tmp_path / "g.npz", num_nodes__user=np.array([10**9]))
    growth = peak_rss_growth(
        lambda: one_error(
            cli("train", "--dataset", path, "--set", "dataset.reverse_edges=true"),
            "num_nodes__user=1,000,000,000",
            "is free",
            "num_nodes__user in a .npz",
        )
    )
    assert growth < 500 * 2**20


def test_a_heterogeneous_model_too_large_is_one_line_naming_the_model(tmp_path, cli):
    one_error(
        cli("train", "--dataset", typed_npz(tmp_path / "g.npz"), "--set", "model.hidden=10000000"),
        "model 'sage' (plugin 'pyg') with model.hidden=10000000",
        "2 node types of 50 nodes",
        "parameters",
        "is free",
        "use a smaller model.hidden",
    )


class Wide(torch.nn.Module):
    """A plugin model sized by its own option, not by model.hidden or model.layers."""

    def __init__(self, in_dim, out_dim, width=8):
        super().__init__()
        self.lin = torch.nn.Linear(in_dim, width)
        self.out = torch.nn.Linear(width, out_dim)

    def forward(self, graph, x):
        return self.out(self.lin(x))


class WidePlugin:
    from gnnbridge import hookimpl

    @hookimpl
    def register_models(self, register):
        register("wide", Wide, tasks=["node"])


def test_a_plugin_model_too_large_is_named_and_not_blamed_on_settings_it_ignores(tmp_path, cli):
    from gnnbridge.testing import registered_plugin

    with registered_plugin(WidePlugin(), "lab"):
        line = one_error(
            cli(
                "train",
                "--dataset",
                tiny_npz(tmp_path / "g.npz"),
                "--set",
                "model.arch=wide",
                "--set",
                "model.options.width=10000000000",
            ),
            "model 'wide' (plugin 'lab') on 4 features",
            "parameters",
            "is free",
            "does not read model.hidden or model.layers",
            "model.options",
        )
    assert "use a smaller model.hidden" not in line and "model.hidden=" not in line


def test_negatives_times_batch_size_are_refused_before_they_are_drawn(tmp_path, cli):
    """200,000 featureless items allow 199,999 negatives per edge: 256 edges of them are 5 x 10**7
    pairs, each with both ends' states gathered to score it."""
    rng = np.random.default_rng(0)
    path = typed_npz(
        tmp_path / "g.npz",
        x__item=None,
        y__item=None,
        num_nodes__item=np.array([200_000]),
        edge_index__user__buys__item=np.stack([rng.integers(0, 30, 4000), rng.integers(0, 200_000, 4000)]),
    )
    growth = peak_rss_growth(
        lambda: one_error(
            cli(
                "train",
                "--dataset",
                path,
                "--set",
                "task=link",
                "--set",
                "link.negatives=199999",
                "--set",
                "model.hidden=512",
            ),
            "train.batch_size=256 with link.negatives=199999 makes 51,200,000 pairs per batch",
            "is free",
            "use a smaller train.batch_size or link.negatives",
        )
    )
    assert growth < 500 * 2**20


@pytest.mark.parametrize(
    "option, needle",
    [
        ("dataset.options.authors_per_paper=1000000000", "mag-synthetic would need about"),
        ("dataset.options.taste_dim=1000000000", "rec-synthetic would need about"),
    ],
)
def test_a_synthetic_generators_size_option_is_refused_before_it_is_generated(cli, option, needle):
    experiment = "mag-synthetic" if "authors" in option else "rec-synthetic"
    growth = peak_rss_growth(
        lambda: one_error(cli("train", experiment, "--set", option), needle, "is free", "use smaller dataset.options")
    )
    assert growth < 500 * 2**20


def test_top_k_over_a_large_graph_is_refused_before_it_is_scored():
    """10**6 sources x 10**5 destinations: eval.batch_size=10**8 would score 6.4 x 10**9 sampled pairs
    at once; from layer-wise states the chunk is bounded, but 10**5 per source is not."""
    from gnnbridge.core.app.inference import check_top_k
    from gnnbridge.core.config import from_dict
    from gnnbridge.core.errors import ResourceError
    from gnnbridge.core.records.hetero import HeteroSource
    from gnnbridge.core.tasks import for_link_task

    edges = torch.stack([torch.arange(1000), torch.arange(1000)])
    data = for_link_task(
        HeteroSource({"user": 10**6, "item": 10**5}, {}, {("user", "buys", "item"): edges}), "", False, 0, 0.1, 0.1, 10
    )
    check_top_k(from_dict({"task": "link"}), data, 10)  # from layer-wise states: chunked, fits
    check_top_k(from_dict({"task": "link", "eval": {"mode": "full"}}), data, 10)  # the default batch fits
    with pytest.raises(
        ResourceError,
        match=r"^--top-k 10 for 1,000,000 sources over 100,000 destinations, 6,400,000,000 sampled pairs "
        r"at a time \(eval.mode=full, eval.batch_size=100000000\)",
    ):
        check_top_k(from_dict({"task": "link", "eval": {"mode": "full", "batch_size": 10**8}}), data, 10)
    with pytest.raises(ResourceError, match=r"^--top-k 100000 for 1,000,000 sources .* MB of scores at a time"):
        check_top_k(from_dict({"task": "link"}), data, 10**5)  # the lists alone: 1.2 TB


def test_top_k_beyond_every_sources_candidates_is_refused_and_short_lists_are_counted(tmp_path, cli):
    """8 items; three users bought 7 of them. ``--top-k`` above what any user can be given is one
    line naming K and that count (never a silently narrower file); a user with fewer candidates
    than K gets a full-width row whose unfilled slots numpy refuses as indices, and ``counts``."""
    from gnnbridge.core.tasks.retrieval import NO_SLOT

    rng = np.random.default_rng(0)
    bought = [(u, i) for u in range(30) for i in rng.choice(8, 7 if u < 3 else 2, replace=False)]
    np.savez(
        tmp_path / "tiny.npz",
        num_nodes__user=np.array([30]),
        x__item=rng.normal(size=(8, 4)).astype(np.float32),
        edge_index__user__buys__item=np.array(bought, dtype=np.int64).T,
    )
    options = ["--set", "task=link", "--set", "link.eval_negatives=5", "--set", "link.hits_at=3"]
    assert cli("train", "--dataset", "tiny.npz", *options, "--set", "train.epochs=1", "--quiet", "--out", "run")[0] == 0
    one_error(
        cli("predict", "run", "--out", "p.npz", "--top-k", "9"),
        "--top-k 9 is more than the candidates any 'user' node has: 'item' has 8 node(s)",
        "the most any 'user' node can be given is 8; use --top-k 8 or less",
    )
    one_error(cli("predict", "run", "--out", "p.npz"), "--top-k 10 (the default) is more than")
    assert not (tmp_path / "p.npz").exists()
    for mode in ("layerwise", "full"):  # lists from final states, and from sampled pairs
        out = tmp_path / f"{mode}.npz"
        assert cli("predict", "run", "--out", out, "--top-k", "4", "--set", f"eval.mode={mode}")[0] == 0
        p = np.load(out)
        top, scores, counts = p["top_dst"], p["top_scores"], p["counts"]
        assert top.shape == scores.shape == (30, 4) and counts.shape == (30,)
        assert (counts[:3] < 4).all() and (counts[3:] == 4).all()
        for row, count in enumerate(counts):
            assert (top[row, count:] == NO_SLOT).all() and (scores[row, count:] == -np.inf).all()
            assert (top[row, :count] >= 0).all() and np.isfinite(scores[row, :count]).all()
        with pytest.raises(IndexError):
            np.arange(8)[top[0]]  # -1 would have read the last item


def _npz_with_member(path, name, header: bytes, body: bytes = b""):
    tiny_npz(path)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr(f"{name}.npy", header + body)


def _full_header(shape, dtype="<i8") -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buffer.getvalue()


@pytest.mark.parametrize("member", ["unused", "train_idx"])
def test_an_npz_header_claiming_a_trillion_elements_reads_nothing(tmp_path, cli, member):
    path = tmp_path / "g.npz"
    _npz_with_member(path, member, _full_header((10**12,)))
    if member == "unused":
        code, _, err = cli("train", "--dataset", path, "--set", "train.epochs=1", "--quiet", "--out", tmp_path / "r")
        assert code == 0, err  # never looked at
    else:
        growth = peak_rss_growth(
            lambda: one_error(cli("train", "--dataset", path), "train_idx claims shape", "truncated or corrupt")
        )
        assert growth < 500 * 2**20


def test_an_npz_member_that_is_not_an_array_is_one_line(tmp_path, cli):
    path = tmp_path / "g.npz"
    tiny_npz(path)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("val_idx.npy", b"this is text, not an array")
    one_error(cli("train", "--dataset", path), "val_idx is not a numpy array")


# --------------------------------------------------------------------------- 3. YAML bombs and depth

BOMB = (
    "["
    + ",".join(f"&{c} [" + ",".join([f"*{p}" if p else "1"] * 9) + "]" for c, p in zip("abcdefgh", ["", *"abcdefg"]))
    + "]"
)


def test_an_alias_bomb_is_refused_at_once(tmp_path, cli):
    # The message is the proof it was refused before expanding (9**8 items), not a timing.
    one_error(cli("train", "--set", f"model.hidden={BOMB}"), "--set model.hidden expands to more than")
    (tmp_path / "bomb.yaml").write_text(f"name: x\ndataset:\n  options:\n    lol: {BOMB}\n")
    one_error(cli("train", tmp_path / "bomb.yaml"), "bomb.yaml' expands to more than")


def test_deep_nesting_is_one_line_not_a_recursion_error(tmp_path, cli):
    deep = "[" * 20000 + "]" * 20000
    one_error(cli("train", "--set", f"model.hidden={deep}"), "nested more than 32 levels")
    (tmp_path / "deep.yaml").write_text(f"name: {deep}\n")
    one_error(cli("train", tmp_path / "deep.yaml"), "nested more than 32 levels")


def test_a_self_referencing_python_config_is_refused():
    import gnnbridge

    config = {"dataset": {"options": {}}}
    config["dataset"]["options"]["me"] = config
    with pytest.raises(ConfigError, match="expands to more than|nested more than"):
        gnnbridge.resolve_config(config)


# --------------------------------------------------------------------------- 4. divergence


@pytest.mark.parametrize(
    "setting",
    [
        "train.lr=.inf",
        "train.lr=-.inf",
        "train.weight_decay=.nan",
        "model.dropout=.nan",
        "timeout=.inf",
        "train.lr=1e400",
        "dataset.options.homophily=.nan",
    ],
)
def test_non_finite_numbers_are_refused_everywhere(cli, setting):
    key = setting.split("=")[0]
    one_error(cli("train", "--set", setting), key, "finite")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999"])
def test_timeout_flag_must_be_finite(cli, value):
    one_error(cli("train", "--timeout", value), "timeout=", "finite")


def test_a_diverging_run_stops_with_one_line_and_keeps_the_last_good_checkpoint(tmp_path, cli):
    run = tmp_path / "r"
    code, _, err = cli(
        "train", "--dataset", "karate", *KARATE_STEPS, "--set", "train.epochs=1", "--quiet", "--out", run
    )
    assert code == 0, err
    good = (run / "checkpoints" / "latest.pt").read_bytes()
    line = one_error(
        cli("train", "--resume", run, "--set", "train.epochs=3", "--set", "train.lr=1e30", "--quiet"),
        "Training diverged in epoch 2",
        "train.lr=1e+30 is likely too high",
        f"gnnbridge train --resume {run} --set train.lr=SMALLER",
    )
    assert "NaN or infinite" in line
    assert (run / "checkpoints" / "latest.pt").read_bytes() == good
    assert not list((run / "checkpoints").glob(".*partial"))


def test_a_run_diverging_before_its_first_checkpoint_leaves_nothing(tmp_path, cli):
    one_error(
        cli(
            "train", "--dataset", "karate", *KARATE_STEPS, "--set", "train.lr=1e30", "--quiet", "--out", tmp_path / "r"
        ),
        "Training diverged in epoch 1",
    )
    assert not (tmp_path / "r").exists()


def test_nan_outputs_are_never_scored():
    from gnnbridge.core.inference.metrics import ClassificationScores

    scores = ClassificationScores(2)
    scores.update(torch.tensor([[0.1, float("nan")], [1.0, 0.0]]), torch.tensor([1, 0]))
    with pytest.raises(TrainingDivergedError, match="NaN or infinite for 1 of 2 val"):
        scores.as_metrics("val")


# --------------------------------------------------------------------------- 5. every failure is one line


def test_out_that_cannot_be_written_is_one_line(tmp_path, cli):
    (tmp_path / "file").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    one_error(cli("train", "--out", tmp_path / "file" / "run"), "a part of the path is a file")
    one_error(cli("train", "--out", tmp_path / "file"), "is a file")
    one_error(cli("train", "--out", tmp_path / "dangling"), "symbolic link", "does not exist")
    one_error(cli("train", "--out", tmp_path / ("x" * 300)), "longer than the file system allows")
    one_error(cli("train", "--out", "/proc/gnnbridge-run"), "Cannot write")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "file"]


def test_default_runs_folder_in_a_read_only_place_is_one_line(cli, monkeypatch):
    monkeypatch.chdir("/proc")
    one_error(cli("train", "--dataset", "karate", "--quiet"), "Cannot write", "runs")


def test_a_full_disk_while_checkpointing_is_one_line_and_keeps_nothing_partial(tmp_path, cli, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    line = one_error(
        cli("train", "--dataset", "karate", *KARATE_STEPS, "--quiet", "--out", tmp_path / "r"),
        "no space left on the device",
    )
    assert "checkpoint" in line
    assert not (tmp_path / "r").exists()


def test_predict_into_an_unwritable_place_fails_before_inference(tmp_path, cli, monkeypatch):
    run = tmp_path / "r"
    assert cli("train", "--dataset", "karate", "--set", "train.epochs=1", "--quiet", "--out", run)[0] == 0
    from gnnbridge.core.app import inference

    monkeypatch.setattr(inference, "launch", lambda *a, **k: pytest.fail("inference ran before --out was checked"))
    one_error(cli("predict", run, "--out", "/proc/gnnbridge/preds.npz"), "Cannot write --out")


def test_an_unexpected_exception_is_one_line_naming_the_traceback_file(cli, monkeypatch):
    from gnnbridge.core.app import preflight

    def broken(*args, **kwargs):
        raise ValueError("something nobody anticipated")

    monkeypatch.setattr(preflight, "_resolve_device", broken)
    code, _, err = cli("train", "--dataset", "karate")
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "unexpected ValueError: something nobody anticipated" in err
    path = err.split("traceback is in ")[1].split(")")[0]
    assert "Traceback" in Path(path).read_text()
    Path(path).unlink()


def _checkpoint_with(tmp_path, cli, **fields):
    run = tmp_path / "r"
    assert cli("train", "--dataset", "karate", "--set", "train.epochs=1", "--quiet", "--out", run)[0] == 0
    path = run / "checkpoints" / "latest.pt"
    state = torch.load(path, weights_only=True)
    state.update(fields)
    torch.save(state, path)
    return run, path


@pytest.mark.parametrize(
    "fields, needle",
    [
        ({"epoch": "3"}, "epoch is '3'"),
        ({"history": {"a": 1}}, "history is not a list"),
        ({"monitor": [1]}, "monitor is not a monitor state"),
        ({"model": {"w": "weights"}}, "model is not a set of weights"),
        ({"optimizer": 5}, "optimizer is not an optimizer state"),
    ],
)
def test_a_checkpoint_with_wrong_types_is_one_line(tmp_path, cli, fields, needle):
    run, path = _checkpoint_with(tmp_path, cli, **fields)
    one_error(cli("evaluate", path), needle)
    one_error(cli("train", "--resume", run, "--set", "train.epochs=2"), needle)


def test_evaluate_and_predict_check_what_scoring_needs_not_what_training_needs(tmp_path, cli, monkeypatch):
    """They ran training's whole preflight: a checkpoint was refused for memory only training
    needs (gradients, Adam's moments, the best copy, training batches, weighed by building the
    model on the meta device) and for a logger the run used that this machine lacks. Scoring
    needs the weights once, and logs nothing."""
    from gnnbridge.core.app import preflight
    from gnnbridge.plugins import loggers

    run, path = _checkpoint_with(tmp_path, cli)
    state = torch.load(path, weights_only=True)
    state["config"]["log"]["to"] = ["tensorboard"]  # trained where tensorboard was installed
    torch.save(state, path)
    monkeypatch.setattr(loggers._tensorboard, "requires", "gnnbridge_no_such_package")  # not here
    params = sum(t.numel() for t in state["model"].values())
    monkeypatch.setattr(preflight, "available_memory", lambda: 8 * params)  # the weights twice over
    one_error(cli("train", "--dataset", "karate", "--quiet", "--out", tmp_path / "again"), "is free")
    one_error(cli("train", "--dataset", "karate", "--set", "log.to=[tensorboard]"), "gnnbridge_no_such_package")

    def meta_build(*args, **kwargs):
        raise AssertionError("the model was built on the meta device for training's estimates")

    monkeypatch.setattr(preflight, "count_parameters", meta_build)
    code, out, err = cli("evaluate", path, "--json")
    assert code == 0, err
    assert json.loads(out)["metrics"]["test_acc"] >= 0
    assert cli("predict", path, "--out", tmp_path / "p.npz")[0] == 0
    assert np.load(tmp_path / "p.npz")["logits"].shape[0] == 34
    monkeypatch.setattr(preflight, "available_memory", lambda: 2 * params)  # not even the weights: refused
    one_error(cli("evaluate", path), f"The checkpoint's model has {params:,} parameters", "is free")
    assert not (tmp_path / "q.npz").exists() and cli("predict", path, "--out", tmp_path / "q.npz")[0] != 0
    assert not (tmp_path / "q.npz").exists()


# --------------------------------------------------------------------------- 6. a checkpoint is data


def test_evaluate_never_downloads_or_creates_what_a_checkpoint_names(tmp_path, cli):
    run, path = _checkpoint_with(tmp_path, cli)
    state = torch.load(path, weights_only=True)
    root = tmp_path / "attacker" / "chosen"
    state["config"]["dataset"] = {"name": "reddit", "path": None, "root": str(root), "options": {}}
    torch.save(state, path)
    one_error(cli("evaluate", path), "never download", "--set dataset.root=DIR")
    one_error(cli("predict", path, "--out", tmp_path / "p.npz"), "never download")
    assert not (tmp_path / "attacker").exists()
    assert not (tmp_path / "p.npz").exists()


# --------------------------------------------------------------------------- 7. signals


def _train_then_signal(tmp_path, sig, wait_for_checkpoint):
    run = tmp_path / "r"
    # Before the first checkpoint: a graph whose first epoch takes seconds (the default one's took
    # 0.1-0.3 s here, too close to the 50 ms poll to be sure the signal came before it).
    size = [] if wait_for_checkpoint else ["--set", "dataset.options.num_nodes=120000"]
    # The child gets SIGINT's default disposition from tests/conftest.py, also when the suite was
    # started from a background job (which ignores SIGINT, as would the child otherwise).
    proc = start("train", "--set", "train.epochs=500", *size, "--quiet", "--out", run, cwd=tmp_path)
    deadline = time.monotonic() + 240
    marker = run / "checkpoints" / "latest.pt" if wait_for_checkpoint else run / "config.yaml"
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if not marker.exists():
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"no {marker.name} in 240 s (exit code {proc.returncode}); the run printed:\n{err}")
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"the run did not stop on {signal.Signals(sig).name}; it printed:\n{err}") from None
    return proc.returncode, err.strip().splitlines(), run


SEEN_BY_A_CHILD = """
import json, os
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
print(json.dumps({"ignored": int(status["SigIgn"], 16), "blocked": int(status["SigBlk"], 16),
                  "env": sorted(os.environ), "shm": os.environ.get("GNNBRIDGE_SHM_DIR"), "cwd": os.getcwd()}))
"""


def test_a_process_a_test_starts_is_as_a_terminal_would_start_it(tmp_path):
    """The suite passes from a background job (SIGINT ignored, and children inherit that) and
    inside a torchrun or SLURM allocation: tests/conftest.py gives every process a test starts
    SIGINT and SIGTERM as a terminal does, none of the job's or gnnbridge's variables, a private
    shared-memory folder and an empty working folder of its own."""
    import json

    seen = json.loads(
        subprocess.run([PY, "-c", SEEN_BY_A_CHILD], capture_output=True, text=True, timeout=120, check=True).stdout
    )
    for sig in (signal.SIGINT, signal.SIGTERM):
        assert not seen["ignored"] & (1 << (sig - 1)), f"{sig.name} is ignored in a child"
        assert not seen["blocked"] & (1 << (sig - 1)), f"{sig.name} is blocked in a child"
    leaked = [
        name
        for name in seen["env"]
        if name
        in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES")
        or name.startswith(("SLURM_", "TORCHELASTIC_"))
        or name in ("GNNBRIDGE_LOAD_PLUGINS", "GNNBRIDGE_DATA")
    ]
    assert leaked == []
    assert seen["shm"] and Path(seen["shm"]).name.startswith("pytest-gnnbridge-shm-")
    assert Path(seen["cwd"]) == tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_keeps_a_resumable_run_and_says_how_to_continue(tmp_path, sig):
    """--nproc 1 (the --nproc 2 twin is in tests/distributed/test_launch_modes.py)."""
    code, lines, run = _train_then_signal(tmp_path, sig, wait_for_checkpoint=True)
    assert code == 128 + sig, lines
    assert lines == [
        f"Stopped by {signal.Signals(sig).name}{' (Ctrl-C)' if sig == signal.SIGINT else ''}: its "
        f"checkpoint is kept in {run}; continue it with: gnnbridge train --resume {run}."
    ]
    assert (run / "checkpoints" / "latest.pt").is_file()
    assert not list(run.rglob("*.partial")) and not list(run.rglob("*.tmp"))


@pytest.mark.slow
def test_sigterm_before_the_first_checkpoint_frees_the_out_folder(tmp_path):
    code, lines, run = _train_then_signal(tmp_path, signal.SIGTERM, wait_for_checkpoint=False)
    assert code == 143
    assert len(lines) == 1 and lines[0].startswith("Stopped by SIGTERM"), lines
    assert not run.exists()


# Ctrl-C while torch.save writes a checkpoint, every time: the run's second torch.save gets a
# file that sends the process SIGINT on its second write, in the middle of the checkpoint.
SIGINT_MID_SAVE = textwrap.dedent("""
    import os, signal, torch

    _save, _calls = torch.save, [0]

    class Interrupting:
        def __init__(self, f):
            self.f, self.writes = f, 0

        def write(self, data):
            self.writes += 1
            if self.writes == 2:
                os.kill(os.getpid(), signal.SIGINT)
            return self.f.write(data)

        def __getattr__(self, name):
            return getattr(self.f, name)

    def save(obj, f, *args, **kwargs):
        _calls[0] += 1
        return _save(obj, Interrupting(f) if _calls[0] == 2 else f, *args, **kwargs)

    torch.save = save
""")


@pytest.mark.slow
def test_ctrl_c_while_a_checkpoint_is_written_stops_the_run_as_itself(tmp_path):
    proc = gnnbridge(
        *("train", "--dataset", "karate", *KARATE_STEPS, "--set", "train.epochs=4", "--set", "log.to=[csv]"),
        *("--quiet", "--out", "r"),
        cwd=tmp_path,
        env=hooked_env(tmp_path, SIGINT_MID_SAVE),
    )
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "Stopped by SIGINT (Ctrl-C): its checkpoint is kept in r; continue it with: gnnbridge train --resume r."
    ]
    from gnnbridge.core.inference import checkpoint

    # The write the signal landed in was finished first: the second epoch's checkpoint, whole.
    assert checkpoint.load(tmp_path / "r" / "checkpoints" / "latest.pt")["epoch"] == 1
    assert not list((tmp_path / "r").rglob("*.partial"))
    resumed = gnnbridge("train", "--resume", "r", "--quiet", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((tmp_path / "r" / "results.json").read_text())["epochs_trained"] == 4
    # The stop came before the logger took the second epoch: the resume gave it that epoch first.
    assert [line.split(",")[0] for line in (tmp_path / "r" / "metrics.csv").read_text().splitlines()] == [
        "epoch",
        "1",
        "2",
        "3",
        "4",
    ]


# --------------------------------------------------------------------------- 8. monitors


def test_a_monitor_that_can_never_improve_is_refused_up_front(tmp_path, cli):
    n = 40
    path = tiny_npz(
        tmp_path / "g.npz",
        n=n,
        train_idx=np.arange(0, 20, dtype=np.int64),
        val_idx=np.arange(20, 40, 2, dtype=np.int64),
        test_idx=np.arange(21, 40, 2, dtype=np.int64),
    )
    line = one_error(
        cli("train", "--dataset", path, "--set", "train.monitor=val_roc_auc", "--out", tmp_path / "r"),
        "train.monitor=val_roc_auc",
        "val split has class 0",
    )
    assert "train.monitor=val_acc" in line
    assert not (tmp_path / "r").exists()


# --------------------------------------------------------------------------- 9. the script guard

UNGUARDED = """
import gnnbridge
results = gnnbridge.run("sage-synthetic", nproc=2, overrides=["train.epochs=1"], out={out!r})
print(results["metrics"]["test_acc"])
"""


def test_a_script_without_the_main_guard_is_one_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(UNGUARDED.format(out=str(tmp_path / "r")))
    proc = subprocess.run([PY, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert "Traceback" in proc.stderr  # a plain library error in a user's script: Python prints it
    assert "line 3: a run with several ranks is started at the top level" in lines[-1]
    assert 'if __name__ == "__main__":' in lines[-1]
    assert not (tmp_path / "r").exists()


def test_the_guard_check_reads_the_script():
    import ast

    from gnnbridge.core.runtime.launcher import _under_main_guard

    tree = ast.parse(
        "import x\nx.run()\nif __name__ == '__main__':\n    x.run()\n    y = 1\nif '__main__' == __name__:\n"
        "    x.run()\n"
    )
    assert [_under_main_guard(tree, line) for line in (2, 4, 5, 7)] == [False, True, True, True]


# --------------------------------------------------------------------------- 10. messages


@pytest.mark.parametrize(
    "setting, needle",
    [
        ("dataset.options.avg_degree=-1", "dataset.options.avg_degree=-1.0 must be > 0"),
        ("dataset.options.homophily=2", "dataset.options.homophily=2.0 must be in [0, 1]"),
        ("dataset.options.num_nodes=5", "dataset.options.num_nodes=5 is too small"),
        ("dataset.options.num_nodes=1000000000000", "synthetic graph"),
    ],
)
def test_dataset_option_messages_name_the_bad_value(cli, setting, needle):
    one_error(cli("train", "--set", setting), needle)


def test_a_big_endian_array_says_how_to_convert(tmp_path, cli):
    path = tiny_npz(tmp_path / "g.npz", y=(np.arange(40) % 2).astype(">i8"))
    one_error(cli("train", "--dataset", path), "y has dtype >i8 (big-endian int64)", "y.astype(numpy.int64)")


def test_overrides_given_as_a_string_are_refused():
    import gnnbridge

    with pytest.raises(ConfigError, match=r"overrides='train.epochs=3' is a string; pass a list"):
        gnnbridge.resolve_config(overrides="train.epochs=3")


def test_an_unknown_plugin_in_the_load_list_is_named(tmp_path):
    proc = gnnbridge("backends", cwd=tmp_path, env=suite_env(GNNBRIDGE_LOAD_PLUGINS="pyg,bogus"), timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "names 'bogus', which is not an installed plugin" in proc.stderr


def test_an_unresolvable_master_addr_is_one_line(tmp_path):
    env = suite_env(RANK="1", WORLD_SIZE="2", MASTER_ADDR="no-such-host.invalid", MASTER_PORT="29555")
    proc = gnnbridge("train", "--dataset", "karate", "--timeout", "20", cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "MASTER_ADDR='no-such-host.invalid' does not resolve" in proc.stderr


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--backend", ""], "--backend is empty"),
        (["/dev/zero"], "Config file '/dev/zero' is not a regular file"),
        (["--dataset", "/dev/zero"], "Dataset file '/dev/zero' is not a regular file"),
    ],
)
def test_empty_names_and_special_files_are_named(cli, args, needle):
    one_error(cli("train", *args), needle)
