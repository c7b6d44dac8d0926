"""Real disk faults for store tests: a small tmpfs of its own, filled up or made read-only.

The store under test sees the kernel's own ``ENOSPC`` and ``EROFS``, not a patched
connection. Mounting needs root (the test machines run the suite as root).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["SmallDisk", "small_disk"]


class SmallDisk:
    """A mounted tmpfs of a few megabytes: ``fill()``/``free()`` and ``read_only()``/``writable()``."""

    def __init__(self, mountpoint: Path) -> None:
        self.mountpoint = mountpoint
        self._filler = mountpoint / "filler"

    def fill(self) -> None:
        """Write a file until the kernel says the disk is full (ENOSPC)."""
        fd = os.open(self._filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError as exc:
            if exc.errno != 28:  # ENOSPC: full, as wanted
                raise
        finally:
            os.close(fd)
        assert os.statvfs(self.mountpoint).f_bavail == 0

    def free(self) -> None:
        self._filler.unlink()

    def read_only(self) -> None:
        """Remount read-only (the kernel refuses while a file on it is open for writing)."""
        _mount("-o", "remount,ro", str(self.mountpoint))

    def writable(self) -> None:
        _mount("-o", "remount,rw", str(self.mountpoint))


def _mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    assert done.returncode == 0, f"mount {' '.join(args)} failed (the disk-fault tests need root): {done.stderr.strip()}"


@contextmanager
def small_disk(mountpoint: Path, size: str = "4m") -> Iterator[SmallDisk]:
    """A tmpfs of ``size`` mounted at ``mountpoint`` for the block; unmounted after."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mountpoint))
    try:
        yield SmallDisk(mountpoint)
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=True)
