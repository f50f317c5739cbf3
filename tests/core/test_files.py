"""gnnbridge.core.files: replace, publish and lock, the three ways gnnbridge writes a file."""

from __future__ import annotations

import fcntl
import json
import os

import pytest

from gnnbridge.core import files
from gnnbridge.core.errors import OutputExistsError, OutputPathError


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_write_json_replaces_a_link_never_what_it_points_to(tmp_path):
    outside = tmp_path / "outside.json"
    outside.write_text("theirs")
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").symlink_to(outside)
    files.write_json(run / "results.json", {"a": 1})
    assert outside.read_text() == "theirs"
    assert not (run / "results.json").is_symlink()
    assert json.loads((run / "results.json").read_text()) == {"a": 1}
    assert leftovers(run) == []


def test_publish_writes_the_file_whole_and_leaves_no_temporary(tmp_path):
    out = tmp_path / "new" / "preds.npz"
    with files.reserved(out) as tmp:
        assert tmp.exists() and tmp.parent == out.parent  # created before any work
        files.publish(out, tmp, lambda f: f.write(b"data"), "predicting")
    assert out.read_bytes() == b"data"
    assert leftovers(out.parent) == []


def test_publish_never_replaces_a_file_that_appeared_meanwhile(tmp_path):
    out = tmp_path / "preds.npz"
    with pytest.raises(OutputExistsError) as err, files.reserved(out) as tmp:
        out.write_text("someone else's")
        files.publish(out, tmp, lambda f: f.write(b"ours"), "predicting")
    assert str(err.value) == f"'{out}' appeared while predicting; it was left as it is."
    assert out.read_text() == "someone else's"
    assert leftovers(tmp_path) == []


def test_a_folder_that_cannot_be_made_is_one_line_before_any_work(tmp_path):
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "curves.png"
    with pytest.raises(OutputPathError) as err, files.reserved(out):
        pytest.fail("the block ran")
    assert str(err.value) == (
        f"Cannot write --out '{out}': it exists and is not a folder (a file, or a link to nothing); choose a folder "
        "you can write (--out DIR)."
    )


def test_a_run_folder_held_by_another_process_is_refused(tmp_path):
    fd = os.open(tmp_path / files.LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another open file description: as another process would hold it
    try:
        assert files.run_folder_in_use(tmp_path)
        with pytest.raises(OutputExistsError, match="is in use by another gnnbridge run"):
            files.lock_run_folder(tmp_path)
    finally:
        os.close(fd)
    files.lock_run_folder(tmp_path)
    try:
        assert not files.run_folder_in_use(tmp_path)  # this process's own hold does not count
    finally:
        files.release_run_folder(tmp_path)


def test_replace_with_copy_links_the_same_file_in_one_step(tmp_path):
    src, dst = tmp_path / "latest.pt", tmp_path / "best.pt"
    src.write_bytes(b"weights")
    dst.write_bytes(b"older")
    files.replace_with_copy(dst, src)
    assert dst.read_bytes() == b"weights" and dst.stat().st_ino == src.stat().st_ino
    assert leftovers(tmp_path) == []
