"""``python -m gnnbridge.testing.mapped_job FOLDER OUT`` under torchrun: every rank takes the
graph of ``FOLDER`` (relative to the rank's working folder: each "machine" of a test has its own
copy, as machines without a shared file system do) through ``node_shared``, memory-mapped, and
reports where its ``x`` lives (:func:`~gnnbridge.testing.workers.where_x_lives`). A failure is
printed as the CLI prints it: one ``Error:`` line per node, nothing from quiet ranks."""

from __future__ import annotations

import sys

from gnnbridge.core.errors import GnnBridgeError
from gnnbridge.core.runtime.jobs import detect_job
from gnnbridge.core.runtime.launcher import launch
from gnnbridge.testing.workers import where_x_lives


def main(folder: str, out: str) -> None:
    job = detect_job()
    try:
        launch(where_x_lives, job.world_size, "cpu", (None, out, folder), timeout_s=60, job=job)
    except GnnBridgeError as exc:
        if not getattr(exc, "quiet", False):
            print(f"Error: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main(*sys.argv[1:])
