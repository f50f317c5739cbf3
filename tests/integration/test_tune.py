"""``gnnbridge tune`` as a user meets it: a small search ends in its table, ``best.yaml`` and a
best run folder that ``evaluate`` takes; a bad space is one line with nothing written; a failing
trial is recorded and the search goes on; a second command extends the study, a killed one
resumes without losing a finished trial; a pruned trial of two ranks stops both cleanly; two
commands share one SQLite study. Each trial is a tiny real run (300 nodes, 2-3 epochs)."""

import json
import signal
import sqlite3
import time

import pytest
import yaml
from helpers import gnnbridge, ok, one_line, start

pytest.importorskip("optuna")
pytestmark = pytest.mark.slow
TINY = ["--set", "dataset.options.num_nodes=300", "--set", "train.batch_size=64", "--set", "train.epochs=2"]


def _space(tmp_path, name: str, space: dict):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return str(path)


def _states(db) -> list[tuple[int, str]]:
    """(number, state) of every trial in the SQLite study at ``db``, read as another process would."""
    with sqlite3.connect(db, timeout=60) as con:
        return con.execute("SELECT number, state FROM trials ORDER BY number").fetchall()


def test_search_shows_best_and_extends(tmp_path):
    space = _space(tmp_path, "space.yaml", {"train.lr": {"log": [1e-3, 1e-1]}, "model.hidden": [16, 32]})
    done = ok(gnnbridge("tune", "--space", space, "--trials", "3", "--out", "s", *TINY, cwd=tmp_path))
    lines = done.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("trial  state"))
    assert ["train.lr", "model.hidden"] == lines[head].split()[5:7]
    assert [line.split()[1] for line in lines[head + 1 : head + 4]] == ["complete"] * 3
    folder = tmp_path / "s"
    assert {"best.yaml", "best", "history.png", "study.db", "tune.json"} <= {p.name for p in folder.iterdir()}
    best = yaml.safe_load((folder / "best.yaml").read_text())
    results = json.loads((folder / "best" / "results.json").read_text())
    assert best == yaml.safe_load((folder / "best" / "config.yaml").read_text())
    import gnnbridge as gb

    assert gb.evaluate(folder / "best")["metrics"]["val_acc"] == pytest.approx(results["metrics"]["val_acc"])
    before = _states(folder / "study.db")
    ok(gnnbridge("tune", "--space", space, "--trials", "4", "--out", "s", *TINY, cwd=tmp_path))
    after = _states(folder / "study.db")
    assert after[:3] == before and len(after) == 4 and after[3][1] == "COMPLETE"
    shown = ok(gnnbridge("tune", "--show", "s", cwd=tmp_path)).stdout
    assert shown.count("complete") == 4 and "best: trial" in shown


@pytest.mark.parametrize(
    ("space", "needle"),
    [
        ({"model.hiden": [16, 32]}, "Unknown config key 'model.hiden'"),
        ({"model.hidden": [0, 16]}, "model.hidden=0"),
        ({"train.lr": {"log": [0, 0.1]}}, "log scale, so low must be > 0"),
        ({"train.lr": {"uniform": [0.1, 0.01]}}, "low <= high"),
        ({"train.lr": {"normal": [0, 1]}}, "neither a list of choices nor one range"),
        ({"train.monitor": ["val_acc"]}, "cannot be tuned"),
    ],
)
def test_bad_space_is_one_line_and_writes_nothing(tmp_path, refused, space, needle):
    path = _space(tmp_path, "space.yaml", space)
    one_line(refused("tune", "--space", path, "--trials", "2", "--out", "s"), needle)
    assert not (tmp_path / "s").exists()


def test_grid_refuses_a_float_range(tmp_path, refused):
    path = _space(tmp_path, "space.yaml", {"model.dropout": {"uniform": [0, 0.5]}})
    one_line(refused("tune", "--space", path, "--trials", "2", "--out", "s", "--sampler", "grid"), "--sampler grid")
    assert not (tmp_path / "s").exists()


def test_failed_trial_is_recorded_and_the_search_goes_on(tmp_path):
    space = _space(tmp_path, "space.yaml", {"train.lr": [0.01, 1e30]})  # 1e30: the loss diverges
    done = ok(
        gnnbridge("tune", "--space", space, "--trials", "2", "--out", "s", "--sampler", "grid", *TINY, cwd=tmp_path)
    )
    assert sorted(state for _, state in _states(tmp_path / "s" / "study.db")) == ["COMPLETE", "FAIL"]
    failed = next(line for line in done.stdout.splitlines() if line.split()[1:2] == ["fail"])
    assert "diverged" in failed.lower()


def test_killed_search_resumes_without_losing_a_finished_trial(tmp_path):
    space = _space(tmp_path, "space.yaml", {"model.hidden": {"int": [8, 32]}})
    args = ["tune", "--space", space, "--trials", "3", "--out", "s", *TINY, "--set", "train.epochs=3"]
    proc = start(*args, cwd=tmp_path)
    db, deadline = tmp_path / "s" / "study.db", time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if db.exists() and any(state == "COMPLETE" for _, state in _states(db)):
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()
    finished = [t for t in _states(db) if t[1] == "COMPLETE"]
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode != 0 and "Traceback" not in err, err
    kept = _states(db)
    assert set(finished) <= set(kept) and len(kept) < 4
    done = ok(gnnbridge(*args, cwd=tmp_path))
    after = _states(db)
    assert set(finished) <= set(after) and [s for _, s in after] == ["COMPLETE"] * 3, done.stdout
    if any(s == "RUNNING" for _, s in kept):  # the trial in flight was finished, not started over
        assert "(continued)" in done.stdout


def test_pruned_trial_of_two_ranks_stops_both_and_studies_are_shared(tmp_path):
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    common = ["--storage", storage, "--study", "s", *TINY, "--set", "train.epochs=3"]
    good = _space(tmp_path, "good.yaml", {"train.lr": {"log": [0.03, 0.05]}})
    ok(gnnbridge("tune", "--space", good, "--trials", "2", "--out", "a", *common, cwd=tmp_path))
    bad = _space(tmp_path, "bad.yaml", {"train.lr": {"log": [1e-8, 2e-8]}})  # learns nothing
    done = ok(
        gnnbridge(
            "tune", "--space", bad, "--trials", "3", "--out", "b", "--pruner", "median", "--nproc", "2",
            "--sampler", "random", *common, cwd=tmp_path,
        )
    )  # fmt: skip
    assert [s for _, s in _states(tmp_path / "shared.db")] == ["COMPLETE", "COMPLETE", "PRUNED"], done.stdout
    results = json.loads((tmp_path / "b" / "trial-2" / "results.json").read_text())
    assert results["world_size"] == 2 and results["stopped_by"]["epoch"] < 2
    assert len(results["history"]) == results["stopped_by"]["epoch"] + 1


def test_two_commands_at_once_share_one_sqlite_study(tmp_path):
    space = _space(tmp_path, "space.yaml", {"model.hidden": {"int": [8, 32]}})
    common = ["--space", space, "--trials", "3", "--storage", f"sqlite:///{tmp_path / 'shared.db'}", *TINY]
    procs = [start("tune", *common, "--out", out, "--seed", str(seed), cwd=tmp_path) for seed, out in enumerate("ab")]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    states = [s for _, s in _states(tmp_path / "shared.db")]
    assert 3 <= len(states) <= 4 and set(states) == {"COMPLETE"}
    ran = [p.name for out in "ab" for p in (tmp_path / out).glob("trial-*")]
    assert len(ran) == len(states) and len(set(ran)) == len(ran)  # every trial once, in one folder


def _owners(db) -> dict[int, dict]:
    """Each trial's ``owner`` user attribute (host and pid of the process that ran it)."""
    with sqlite3.connect(db, timeout=60) as con:
        rows = con.execute(
            "SELECT t.number, a.value_json FROM trial_user_attributes a JOIN trials t ON a.trial_id = t.trial_id "
            "WHERE a.key = 'owner'"
        ).fetchall()
    return {number: json.loads(value) for number, value in rows}


def test_parallel_workers_run_trials_side_by_side(tmp_path):
    space = _space(tmp_path, "space.yaml", {"model.hidden": {"int": [8, 32]}})
    args = ["tune", "--space", space, "--trials", "4", "--parallel", "2", "--nproc", "1", "--out", "s", *TINY]
    done = ok(gnnbridge(*args, cwd=tmp_path))
    db = tmp_path / "s" / "study.db"
    states = _states(db)
    assert 4 <= len(states) <= 5 and {s for _, s in states} == {"COMPLETE"}, done.stdout  # 5: both asked at once
    for number, _ in states:
        assert (tmp_path / "s" / f"trial-{number}" / "results.json").is_file()
    pids = {owner["pid"] for owner in _owners(db).values()}
    assert len(pids) == 2, pids  # two worker processes ran the trials
    assert "[worker 0]" in done.stdout and "[worker 1]" in done.stdout and "best: trial" in done.stdout


def test_parallel_on_cuda_needs_a_gpu_set_per_worker(tmp_path, refused):
    space = _space(tmp_path, "space.yaml", {"model.hidden": [8, 16]})
    args = ["tune", "--space", space, "--trials", "2", "--out", "s", "--parallel", "64", "--nproc", "8"]
    one_line(refused(*args, "--device", "cuda"), "--parallel 64 with --nproc 8 needs 512 GPUs of its own")
    assert not (tmp_path / "s").exists()


def test_parallel_search_stopped_by_sigterm_records_both_trials_and_resumes(tmp_path):
    space = _space(tmp_path, "space.yaml", {"model.hidden": {"int": [8, 32]}})
    args = [
        "tune",
        "--space",
        space,
        "--trials",
        "2",
        "--parallel",
        "2",
        "--out",
        "s",
        *TINY,
        "--set",
        "train.epochs=100",
    ]
    proc = start(*args, cwd=tmp_path)
    db, deadline = tmp_path / "s" / "study.db", time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:  # both workers inside a trial's epochs
        if db.exists() and sum(1 for n in range(2) if (tmp_path / "s" / f"trial-{n}" / "config.yaml").exists()) == 2:
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode != 0 and "Traceback" not in err, err
    assert "Stopped by SIGTERM: the 2 workers stopped" in err.strip().splitlines()[-1]
    with sqlite3.connect(db, timeout=60) as con:
        flags = con.execute("SELECT value_json FROM trial_user_attributes WHERE key = 'interrupted'").fetchall()
    assert [json.loads(v) for (v,) in flags] == [True, True], err
    done = ok(gnnbridge(*args, cwd=tmp_path))  # each from its checkpoint
    assert [s for _, s in _states(db)] == ["COMPLETE", "COMPLETE"] and done.stdout.count("(continued)") == 2
