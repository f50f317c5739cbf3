"""The disk's random 4 KiB read rate at queue depth 1 and 64: the physical limit of a cold gather.

Why: a batch's feature rows on a cold page cache are random reads; how many of them the disk
serves per second with one read in flight (what one page fault at a time gets) and with 64 in
flight (what overlapping faults can reach) bounds the gathered rows/s. Measured with direct I/O
(``O_DIRECT``), so the page cache neither helps nor is disturbed.

With ``fio`` installed (Debian: ``apt-get install fio``) it runs ``fio --rw=randread --bs=4k
--direct=1`` (libaio at depth 64, psync at depth 1) on the given file, read-only. Without it, a
Python fallback: ``depth`` threads, each reading random 4 KiB-aligned blocks of the file with
``os.preadv`` into its own page-aligned buffer (``O_DIRECT`` needs aligned offsets and memory);
the GIL is released during each read, so ``depth`` reads are in flight, but each costs a few
microseconds of Python, so above ~100k reads/s the fallback measures Python as much as the disk:
``method`` says which ran. The file should be large (the features file itself): a small one may
sit in a cache of the disk or its host.

    python benchmarks/disk_rate.py FILE [--seconds 5 --depths 1,64]
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import subprocess
import sys
import threading
import time

BLOCK = 4096


def fio_rate(path: str, depth: int, seconds: float) -> float:
    """Random 4 KiB direct reads per second by fio at ``depth``."""
    engine = "libaio" if depth > 1 else "psync"
    cmd = [
        "fio",
        "--name=randread",
        f"--filename={path}",
        "--rw=randread",
        "--bs=4k",
        "--direct=1",
        f"--ioengine={engine}",
        f"--iodepth={depth}",
        f"--runtime={seconds:g}",
        "--time_based",
        "--readonly",
        "--output-format=json",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return float(json.loads(done.stdout)["jobs"][0]["read"]["iops"])


def python_rate(path: str, depth: int, seconds: float) -> float:
    """The same with ``depth`` Python threads doing ``O_DIRECT`` preads (see the module doc)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    blocks = os.fstat(fd).st_size // BLOCK
    counts = [0] * depth
    stop = time.perf_counter() + seconds

    def reader(slot: int) -> None:
        buf = mmap.mmap(-1, BLOCK)  # anonymous mappings are page aligned
        rand = int.from_bytes(os.urandom(8), "little") | 1
        n = 0
        while time.perf_counter() < stop:
            rand = (rand * 6364136223846793005 + 1442695040888963407) & (2**64 - 1)
            os.preadv(fd, [buf], ((rand >> 11) % blocks) * BLOCK)
            n += 1
        counts[slot] = n

    try:
        t0 = time.perf_counter()
        workers = [threading.Thread(target=reader, args=(i,)) for i in range(depth)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return sum(counts) / (time.perf_counter() - t0)
    finally:
        os.close(fd)


def disk_rates(path: str, depths: tuple[int, ...] = (1, 64), seconds: float = 5.0) -> dict:
    """``{"method": "fio" | "python", "file", "reads_per_s": {depth: rate}}``."""
    method = "fio" if shutil.which("fio") else "python"
    measure = fio_rate if method == "fio" else python_rate
    return {
        "method": method,
        "file": path,
        "seconds": seconds,
        "reads_per_s": {str(d): measure(path, d, seconds) for d in depths},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--depths", default="1,64")
    args = parser.parse_args(argv)
    print(json.dumps(disk_rates(args.file, tuple(int(d) for d in args.depths.split(",")), args.seconds)))


if __name__ == "__main__":
    sys.exit(main())
