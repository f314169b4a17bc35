"""The shared-memory files of this process's clients in /dev/shm (other processes, such
as another test worker, have files of their own there)."""

from __future__ import annotations

import os

from triton_sdk._shm import HOST, PREFIX


def region_files() -> list[str]:
    """The names of this process's region files, sorted."""
    ours = f"{PREFIX}{HOST}-{os.getpid()}-"
    return sorted(name for name in os.listdir("/dev/shm") if name.startswith(ours))
