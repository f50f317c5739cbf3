"""Fuzzing the two files a user hands us: a graph ``.npz`` and an experiment YAML.

A few hundred seeded mutations of a valid file each go through the real CLI (``gnnbridge train``,
in this process, one epoch on a tiny graph). Each must end in success or in exactly one
``Error:`` line that is not the catch-all "unexpected" one, within a time limit, and the whole
run must stay within a bounded amount of memory. A failure names the seed, so it replays alone.
"""

from __future__ import annotations

import io
import random
import resource
import signal
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml

NPZ_CASES = 160
YAML_CASES = 160
CASE_LIMIT_S = 180  # a deadline for a hang (fails naming the case), generous for a busy 2-core machine
MEMORY_LIMIT = 1536 * 2**20  # growth of peak RSS over all cases


class Hung(BaseException):
    """Raised by the alarm: not an Exception, so no handler on the way can swallow it."""


@pytest.fixture
def train(capsys, monkeypatch, tmp_path):
    from gnnbridge.cli import main

    monkeypatch.chdir(tmp_path)

    def on_alarm(signum, frame):
        raise Hung()

    previous = signal.signal(signal.SIGALRM, on_alarm)

    def run(*args) -> tuple[int, str]:
        signal.alarm(CASE_LIMIT_S)
        code = 0
        try:
            main(["train", *map(str, args), "--quiet", "--nproc", "1", "--max-restarts", "0"])
        except SystemExit as exc:
            code = exc.code or 0
        finally:
            signal.alarm(0)
        return code, capsys.readouterr().err

    yield run
    signal.signal(signal.SIGALRM, previous)


def verdict(code: int, err: str) -> str | None:
    """None when the case ended as the contract says, else what was wrong."""
    if "Traceback" in err:
        return "traceback"
    if code == 0:
        return None
    lines = err.strip().splitlines()
    if len(lines) != 1 or not lines[0].startswith("Error: "):
        return f"{len(lines)} lines"
    if lines[0].startswith("Error: unexpected"):
        return "unexpected exception"
    return None


def run_cases(cases, train, tmp_path):
    failures = []
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    for i, (what, args) in enumerate(cases):
        try:
            code, err = train(*args, "--out", tmp_path / f"run{i}")
        except Hung:
            failures.append(f"case {i} ({what}): still running after {CASE_LIMIT_S} s")
            continue
        problem = verdict(code, err)
        if problem:
            failures.append(f"case {i} ({what}): {problem}: {err.strip()[-300:]}")
    growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert not failures, "\n".join(failures[:10])
    assert growth < MEMORY_LIMIT, f"peak memory grew by {growth / 2**20:.0f} MB"


# --------------------------------------------------------------------------- npz


def base_arrays(rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = 30
    src = rng.integers(0, n, 90)
    return {
        "edge_index": np.stack([src, rng.integers(0, n, 90)]).astype(np.int64),
        "x": rng.normal(size=(n, 3)).astype(np.float32),
        "y": (np.arange(n) % 2).astype(np.int64),
        "train_idx": np.arange(0, 18, dtype=np.int64),
        "val_idx": np.arange(18, 24, dtype=np.int64),
        "test_idx": np.arange(24, 30, dtype=np.int64),
    }


ODD_DTYPES = ["int32", "float64", "float16", "bool", "uint8", ">i8", ">f4", "<U3", "complex64", "int64", "float32"]
ODD_VALUES = [0, -1, 1, 29, 30, 2**31, 10**9, 2**62, -(2**62)]


def mutate_arrays(arrays: dict, r: random.Random) -> str:
    key = r.choice(sorted(arrays) + ["node_ptr"])
    op = r.choice(["drop", "dtype", "shape", "value", "empty", "nan", "node_ptr", "object", "huge-header"])
    a = arrays.get(key, np.arange(3, dtype=np.int64))
    if a.dtype.kind in "OU":  # an earlier mutation made it unusable as numbers: replace it whole
        op = "drop"
    if op == "drop":
        arrays.pop(key, None)
    elif op == "dtype":
        arrays[key] = a.astype(r.choice(ODD_DTYPES))
    elif op == "shape":
        arrays[key] = r.choice([a.reshape(-1), a.reshape(1, -1), a[..., None], a.reshape(-1)[: r.randint(0, 5)]])
    elif op == "value":
        a = np.array(a, copy=True)
        if a.size:
            a.reshape(-1)[r.randrange(a.size)] = (
                r.choice(ODD_VALUES) if a.dtype.kind in "iu" else float(r.choice(ODD_VALUES))
            )
        arrays[key] = a
    elif op == "empty":
        arrays[key] = np.zeros((0,) * max(1, a.ndim), dtype=a.dtype)
    elif op == "nan":
        a = np.array(a, dtype=np.float32)
        a.reshape(-1)[: r.randint(1, 3)] = r.choice([np.nan, np.inf, -np.inf])
        arrays[key] = a
    elif op == "node_ptr":
        arrays["node_ptr"] = np.array(sorted(r.sample(range(-2, 32), r.randint(1, 6))), dtype=np.int64)
        arrays["y"] = (np.arange(max(0, len(arrays["node_ptr"]) - 1)) % 2).astype(np.int64)
    elif op == "object":
        arrays[key] = np.array([{"a": 1}, None], dtype=object)
    return f"{op} {key}"


def npz_bytes(arrays: dict, huge_header: bool, r: random.Random) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    data = buffer.getvalue()
    if huge_header:  # a member whose header claims far more than it holds
        out = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
            for info in src.infolist():
                body = src.read(info)
                if r.random() < 0.5:
                    body = body.replace(b"(30,", b"(30000000000,").replace(b"(2, 90)", b"(2, 9000000000000)")
                dst.writestr(info, body)
        data = out.getvalue()
    return data


def corrupt_bytes(data: bytes, r: random.Random) -> tuple[bytes, str]:
    data = bytearray(data)
    op = r.choice(["flip", "truncate", "insert", "zero"])
    if op == "flip":
        for _ in range(r.randint(1, 20)):
            data[r.randrange(len(data))] ^= 1 << r.randrange(8)
    elif op == "truncate":
        del data[r.randrange(len(data)) :]
    elif op == "insert":
        at = r.randrange(len(data))
        data[at:at] = bytes(r.randrange(256) for _ in range(r.randint(1, 64)))
    else:
        at = r.randrange(len(data))
        data[at : at + r.randint(1, 200)] = bytes(min(200, len(data) - at))
    return bytes(data), op


def npz_cases(tmp_path: Path):
    for seed in range(NPZ_CASES):
        r = random.Random(seed)
        arrays = base_arrays(np.random.default_rng(seed))
        if r.random() < 0.3:
            for k in ("train_idx", "val_idx", "test_idx"):
                arrays.pop(k)
        what = [mutate_arrays(arrays, r) for _ in range(r.randint(0, 3))]
        data = npz_bytes(arrays, huge_header=r.random() < 0.15, r=r)
        if r.random() < 0.4:
            data, op = corrupt_bytes(data, r)
            what.append(f"bytes {op}")
        path = tmp_path / f"g{seed}.npz"
        path.write_bytes(data)
        yield f"seed {seed}: {', '.join(what) or 'valid'}", ("--dataset", path, "--set", "train.epochs=1")


@pytest.mark.slow  # tens of runs: the fast loop (make test-fast) leaves it to make test
def test_mutated_npz_files_end_in_success_or_one_error_line(tmp_path, train):
    run_cases(list(npz_cases(tmp_path)), train, tmp_path)


# --------------------------------------------------------------------------- YAML

BASE_YAML = """\
name: fuzz
task: node
dataset:
  name: synthetic
  options: {num_nodes: 60, num_classes: 3, num_features: 4, avg_degree: 4.0}
model: {arch: sage, hidden: 8, layers: 2, dropout: 0.1}
sampler: {kind: auto, fanouts: [5, 5]}
train: {epochs: 1, batch_size: 32, lr: 0.01, checkpoint_every: 1, monitor: val_acc}
eval: {mode: layerwise, batch_size: 64}
"""

POOL = [
    -1,
    0,
    1,
    2,
    3,
    7,
    10**30,
    2**63,
    -(2**63),
    float("nan"),
    float("inf"),
    float("-inf"),
    1e-300,
    0.5,
    "x",
    "",
    "karate",
    "sage",
    "gat",
    "gcn",
    "gin",
    "mean",
    "cuda",
    "auto",
    "pyg",
    "dgl",
    "val_roc_auc",
    "graph",
    "sampled",
    [],
    [1, 2],
    [-1, -1],
    [5],
    {},
    {"a": 1},
    None,
    True,
    False,
]
SPECIALS = list("&*[]{}:-!|>'\"#%@,?\n\t ") + ["!!python/object:os.system", "<<: *a", "&a", "*a", "---", "..."]
DEEP = "[" * 5000 + "]" * 5000
BOMB = (
    "["
    + ",".join(f"&{c} [" + ",".join([f"*{p}" if p else "1"] * 9) + "]" for c, p in zip("abcdefgh", ["", *"abcdefg"]))
    + "]"
)


def leaf_paths(data, prefix=()):
    if isinstance(data, dict):
        for key, value in data.items():
            yield from leaf_paths(value, (*prefix, key))
    yield prefix


def mutate_yaml(r: random.Random) -> tuple[str, str]:
    data = yaml.safe_load(BASE_YAML)
    op = r.choice(["value", "value", "value", "delete", "unknown", "text", "text", "bomb", "deep"])
    if op in ("value", "delete", "unknown"):
        path = r.choice([p for p in leaf_paths(data) if p])
        node = data
        for part in path[:-1]:
            node = node[part]
        if op == "value":
            node[path[-1]] = r.choice(POOL)
        elif op == "delete":
            del node[path[-1]]
        else:
            node[f"{path[-1]}_x"] = 1
        return yaml.safe_dump(data), f"{op} {'.'.join(map(str, path))}"
    text = BASE_YAML
    if op == "text":
        for _ in range(r.randint(1, 4)):
            at = r.randrange(len(text))
            text = text[:at] + r.choice(SPECIALS) + text[at + r.randint(0, 3) :]
        return text, "text edit"
    key = r.choice(["hidden", "fanouts", "options", "lr"])
    return text.replace(f"{key}: ", f"{key}: {BOMB if op == 'bomb' else DEEP} #", 1), f"{op} in {key}"


def yaml_cases(tmp_path: Path):
    for seed in range(YAML_CASES):
        text, what = mutate_yaml(random.Random(1000 + seed))
        path = tmp_path / f"e{seed}.yaml"
        path.write_text(text)
        yield f"seed {1000 + seed}: {what}", (path, "--set", "train.epochs=1")


@pytest.mark.slow  # tens of runs: the fast loop (make test-fast) leaves it to make test
def test_mutated_experiment_yaml_ends_in_success_or_one_error_line(tmp_path, train):
    run_cases(list(yaml_cases(tmp_path)), train, tmp_path)
