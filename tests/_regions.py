"""The shared-memory files of this process's clients in /dev/shm (other processes, such
as another test worker, have files of their own there)."""

from __future__ import annotations

import os

from triton_sdk._shm import HOST, PREFIX


def region_files(pid: int | None = None) -> list[str]:
    """The names of the region files of process ``pid`` (this one by default), sorted."""
    ours = f"{PREFIX}{HOST}-{os.getpid() if pid is None else pid}-"
    return sorted(name for name in os.listdir("/dev/shm") if name.startswith(ours))
