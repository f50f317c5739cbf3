"""A bug's crash report (the catch-all "unexpected" line and its traceback file) never holds a
database URL's password: it echoes the command line and the exception, which may both name it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gnnbridge import cli
from gnnbridge.tables import sources

URL = "postgresql://analyst:s3cret-pw@127.0.0.1:5/shop"


@pytest.fixture
def crashing_source():
    """A source whose opener has a bug (what the crash report is for), registered as any is."""

    def open_crashing(text: str):
        raise RuntimeError(f"could not open {text[len('crashy+') :]}")

    sources.register_source("crashy", lambda t: t.startswith("crashy+"), open_crashing, "a source with a bug")
    yield f"crashy+{URL}"
    sources.SOURCES.pop("crashy")


def test_the_crash_report_hides_the_password_of_a_url(crashing_source, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["schema", crashing_source])
    assert stop.value.code == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith("Error: unexpected RuntimeError") and "s3cret-pw" not in line.replace("***", "")
    report = Path(re.search(r"traceback is in (\S+?)\)", line).group(1))
    try:
        text = report.read_text()
        assert "analyst:***@127.0.0.1:5/shop" in text  # the command line and the exception, both named
        assert "s3cret-pw" not in text
    finally:
        report.unlink()
