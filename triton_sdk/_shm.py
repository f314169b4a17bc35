"""System shared memory: regions of this host's memory that a local server reads and writes.

A :class:`RegionPool` owns the client's regions. Each is a file in ``/dev/shm`` that is
mapped here, registered with the server (which maps it too), and then unlinked at once:
the mappings stay, so nothing is left in ``/dev/shm`` once the server has it.
Regions are reused call after call (registered once); the pool hands each to one call at
a time. :func:`place` decides which tensors of a request go through regions.

Region names carry a tag of this host and PID namespace, and this process
(``triton_sdk-<tag>-<pid>-<pool>-<n>``), so that the next client of the same tag can
unregister the regions of a process that died without closing its client
(:func:`stale_regions`), and remove the files of one that died before registering them.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import math
import mmap
import os
import re
import secrets
import socket
import threading
import time
import weakref
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

import attrs
import numpy as np

from ._copy import copy_into
from ._dtypes import DATATYPES
from ._errors import InferenceError, InvalidInputError, TritonError
from ._fork import before_fork, on_fork, renew_lock_on_fork
from ._ops import (
    JSON,
    GetCudaSharedMemoryStatus,
    GetSystemSharedMemoryStatus,
    Op,
    RegisterCudaSharedMemory,
    RegisterSystemSharedMemory,
    UnregisterCudaSharedMemory,
    UnregisterSystemSharedMemory,
)
from ._request import InferRequest, RequestedOutput
from ._spec import ModelSpec

if TYPE_CHECKING:
    from ._result import InferResult

__all__ = [
    "DEFAULT_THRESHOLD",
    "AnyRegion",
    "CudaRegion",
    "Placement",
    "PlacementPlan",
    "Region",
    "RegionPool",
    "SharedMemory",
    "SharedMemoryOutputs",
    "cuda_device",
    "on_sockets",
    "place",
    "regions_lost",
    "remove_stale_files",
    "stale_regions",
]

SharedMemory = str
"""``"auto"`` | ``"off"`` | ``"system"`` | ``"cuda"`` | ``"cuda:<device>"``: how large
tensors travel (see the docs)."""

MODES: Final = ("auto", "off", "system")
_CUDA_MODE: Final = re.compile(r"cuda(?::(?P<device>\d+))?")

SharedMemoryOutputs = Literal["view", "copy"]
"""How outputs that came back in a region are handed out: ``"view"`` (the array is the
region's memory, which is not reused while the array lives) or ``"copy"``."""

DEFAULT_THRESHOLD: Final = 256 * 1024
"""Tensors of at least this many bytes go through shared memory; smaller ones are cheaper
to send over the socket than to copy into a region."""

MAX_LENT: Final = 16
"""Regions a client lends to output views at most; past that, outputs are copied, so that
a program keeping many results does not keep as many regions registered."""

CHECK_EVERY_S: Final = 1.0
"""How often a client asks the server whether it still uses abandoned regions."""

_LONGEST_SWEEP_WAIT: Final = 60.0
"""The longest wait between two sweeps for regions of dead processes the server keeps."""

SURPLUS_AFTER_S: Final = 30.0
"""An idle region passed over by every call of its size for this long is freed: the pool
shrinks back after a burst of concurrent calls."""

_SURPLUS_PER_CHECK: Final = 8
"""Regions freed per check at most (each is a call to the server)."""

PREFIX: Final = "triton_sdk-"
_MIN_REGION: Final = 64 * 1024


def _host_tag() -> str:
    """A short tag of this host's boot and this process's PID namespace.

    Processes that share both (containers that share /dev/shm and the host's pids
    included) agree on it; only they can tell from a pid whether the process that made a
    region is gone, so a client judges only the regions and files of its own tag.
    """
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            ident = boot.read().strip()
    except OSError:
        ident = socket.gethostname()
    with contextlib.suppress(OSError):  # (no /proc: one namespace, as far as it can tell)
        ident += os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    return hashlib.sha256(ident.encode()).hexdigest()[:8]


HOST: Final = _host_tag()


def check_mode(mode: object) -> str:
    if mode in MODES or (isinstance(mode, str) and _CUDA_MODE.fullmatch(mode)):
        return str(mode)
    raise InvalidInputError(
        f"shared_memory must be 'auto', 'off', 'system', 'cuda' or 'cuda:<device>', got {mode!r}"
    )


def cuda_device(mode: str) -> int | None:
    """The GPU a ``"cuda"``/``"cuda:N"`` mode names (0 for ``"cuda"``); None for others."""
    match = _CUDA_MODE.fullmatch(mode)
    if match is None:
        return None
    return int(match["device"] or 0)


def on_sockets(plan: PlacementPlan, mode: str, server_reads_our_memory: bool | None) -> bool:
    """Whether a request of this model goes over the socket whole, without trying regions:
    the mode is off, or it is "auto" and either nothing of the request could reach the
    threshold or the server has been found unable to read this host's memory."""
    return mode == "off" or (
        mode == "auto" and (plan.sockets_only or server_reads_our_memory is False)
    )


def check_outputs(outputs: object) -> bool:
    """True when outputs are handed out as views of their regions."""
    if outputs not in ("view", "copy"):
        raise InvalidInputError(f"shared_memory_outputs must be 'view' or 'copy', got {outputs!r}")
    return outputs == "view"


class NoRoomForRegion(TritonError):
    """This host's shared memory cannot hold a region: /dev/shm is full, too small,
    read-only or absent."""

    def __init__(self, size: int, error: OSError | OverflowError) -> None:
        reason = getattr(error, "strerror", None) or error
        super().__init__(
            f"cannot make a shared-memory region of {size} bytes in /dev/shm: {reason}"
        )


def _allocate(fd: int, size: int) -> None:
    allocate = getattr(os, "posix_fallocate", None)  # (Linux; not on macOS)
    if allocate is None:
        os.ftruncate(fd, size)
    else:
        allocate(fd, 0, size)


class Region:
    """One mapped region: ``name`` on the server, ``key`` in /dev/shm (unlinked once the
    server has it), ``size`` bytes."""

    __slots__ = ("__weakref__", "_map", "key", "name", "registered", "registration", "size")

    mapped: Final = True
    """Its memory is mapped in this process, so outputs can be views of it."""

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.key = "/" + name
        self.size = size
        self.registered = False
        self.registration = 0  # the pool's count of registrations when it was registered
        path = "/dev/shm" + self.key
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        except OSError as error:  # no /dev/shm, or one this process may not write
            raise NoRoomForRegion(size, error) from error
        try:
            # A sparse file would map, then kill this process (SIGBUS) on the first write
            # past what a small /dev/shm (a container's 64 MiB) holds: its pages are taken
            # now, or the error is an exception here.
            _allocate(fd, size)
            self._map = mmap.mmap(fd, size)
        except (OSError, OverflowError) as error:  # (Overflow: past a file's size, 2**63)
            os.unlink(path)
            raise NoRoomForRegion(size, error) from error
        except BaseException:
            os.unlink(path)
            raise
        finally:
            os.close(fd)

    def view(self, size: int, offset: int = 0) -> memoryview:
        return memoryview(self._map)[offset : offset + size]

    def write(self, array: np.ndarray[Any, Any]) -> None:
        """Copy ``array`` (of a numeric wire dtype) to the start of the region."""
        target = np.frombuffer(self.view(array.nbytes), dtype=array.dtype.newbyteorder("<"))
        copy_into(target.reshape(array.shape), array)

    def read(self, size: int, offset: int = 0) -> memoryview:
        """``size`` bytes at ``offset``: the region's memory itself."""
        return self.view(size, offset)

    def register_op(self) -> Op[None]:
        return RegisterSystemSharedMemory(self.name, self.key, self.size)

    def unregister_op(self) -> Op[None]:
        return UnregisterSystemSharedMemory(self.name)

    def unlink(self) -> None:
        """Remove the /dev/shm name; the mappings (here and in the server) stay."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink("/dev/shm" + self.key)

    def close(self) -> None:
        self.unlink()
        # BufferError: a view still uses this memory; the mapping goes with its last view.
        with contextlib.suppress(BufferError):
            self._map.close()


class CudaRegion:
    """``size`` bytes of memory on GPU ``device``, which the server opens through a CUDA
    IPC handle. Made with tritonclient's CUDA shared-memory utilities (the ``cuda-python``
    package). Inputs are copied to the device and outputs back to host memory, so outputs
    are never views of it."""

    __slots__ = (
        "__weakref__",
        "_handle",
        "_utils",
        "device",
        "name",
        "registered",
        "registration",
        "size",
    )

    mapped: Final = False

    def __init__(self, name: str, size: int, device: int) -> None:
        self.name = name
        self.size = size
        self.device = device
        self.registered = False
        self.registration = 0  # the pool's count of registrations when it was registered
        try:
            import tritonclient.utils.cuda_shared_memory as utils
        except (ImportError, RuntimeError) as error:  # RuntimeError: no cuda-python
            raise TritonError(
                f"shared_memory='cuda:{device}' needs the cuda-python package "
                f"(pip install cuda-python): {error}"
            ) from error
        self._utils: Any = utils
        try:
            self._handle = utils.create_shared_memory_region(name, size, device)
        except Exception as error:  # CudaSharedMemoryException, or the driver's own
            raise self._failed(f"allocate {size} bytes of", error) from error

    def write(self, array: np.ndarray[Any, Any]) -> None:
        """Copy ``array`` to the start of the region (little-endian, as the server reads)."""
        data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        try:
            with _copies_on(self.device):
                self._utils.set_shared_memory_region(self._handle, [data])
        except Exception as error:
            raise self._failed("write to", error) from error

    def read(self, size: int, offset: int = 0) -> memoryview:
        """``size`` bytes at ``offset``, copied to host memory (writable, this call's own).

        tritonclient copies the whole region to host memory, then the part read.
        """
        try:
            with _copies_on(self.device):
                host: np.ndarray[Any, Any] = self._utils.get_contents_as_numpy(
                    self._handle, np.uint8, [offset + size]
                )
        except Exception as error:
            raise self._failed("read from", error) from error
        return host[offset:].data

    def _failed(self, action: str, error: Exception) -> TritonError:
        cause = error.__cause__ or error
        # The CUDA runtime's messages reach us as bytes (Exception(b"out of memory")).
        detail = cause.args[0] if len(cause.args) == 1 else cause
        if isinstance(detail, bytes):
            detail = detail.decode(errors="replace")
        return TritonError(f"cannot {action} CUDA shared memory on device {self.device}: {detail}")

    def register_op(self) -> Op[None]:
        raw = base64.b64decode(self._utils.get_raw_handle(self._handle))
        return RegisterCudaSharedMemory(self.name, raw, self.device, self.size)

    def unregister_op(self) -> Op[None]:
        return UnregisterCudaSharedMemory(self.name)

    def unlink(self) -> None:
        """(Nothing to unlink: the memory goes with this process or with close().)"""

    def close(self) -> None:
        handle, self._handle = self._handle, None
        if handle is None:
            return
        # The device memory goes with the handle's last reference. ValueError: code of the
        # user's already took it off tritonclient's list of regions (destroying every one).
        with contextlib.suppress(ValueError):
            self._utils.destroy_shared_memory_region(handle)


_CUDA_COPY_LOCKS: dict[int, threading.Lock] = {}


def _copies_on(device: int) -> threading.Lock:
    """The lock for copies to and from GPU ``device``: tritonclient makes the one stream
    per device they share on first use, unguarded: of two threads making it at once, one
    would have its stream destroyed while using it."""
    lock = _CUDA_COPY_LOCKS.get(device)
    if lock is None:
        lock = _CUDA_COPY_LOCKS.setdefault(device, threading.Lock())
    return lock


AnyRegion: TypeAlias = Region | CudaRegion


class RegionPool:
    """The client's regions, reused by size class; one call at a time per region.

    A region whose memory an output array uses (a view) comes back to the pool only when
    that array and every array made from it are gone. ``device`` is None for system
    shared memory, else the GPU whose memory the pool's regions are.
    """

    _still_stale: set[str]
    _sweep_wait: float
    _sweeping: bool

    def __init__(self, device: int | None = None) -> None:
        self.device = device
        self._start()
        on_fork(self)
        if device is None:  # (a forked child cannot use the parent's CUDA context)
            before_fork(self)

    def claim_sweep(self) -> bool:
        """Whether the caller is to look for regions that dead processes of this host
        left registered: at the first registration, then while the server keeps some of
        them. One sweep at a time: calls that come while one runs go on without it."""
        with self._lock:
            if self._sweeping or time.monotonic() < self._next_sweep:
                return False
            if self._swept and not self._still_stale:
                return False
            self._sweeping = True
            return True

    def swept(self, kept: set[str]) -> None:
        """A sweep is done; the server would not let go of ``kept`` yet: asked again
        after CHECK_EVERY_S, then twice as long each time the same ones are kept (a
        request that never ends would otherwise cost calls once a second for good)."""
        kept_again = bool(kept) and kept == self._still_stale
        self._swept = True
        self._still_stale = kept
        if kept_again:
            self.sweep_later()
        else:
            self._sweep_wait = CHECK_EVERY_S
            self._next_sweep = time.monotonic() + CHECK_EVERY_S
            self._sweeping = False

    def sweep_later(self) -> None:
        """A sweep could not read the server's regions: it is due again after a wait,
        twice as long as the last (what it was to look for is kept)."""
        self._sweep_wait = min(self._sweep_wait * 2, _LONGEST_SWEEP_WAIT)
        self._next_sweep = time.monotonic() + self._sweep_wait
        self._sweeping = False

    def sweep_over(self) -> None:
        """The claimed sweep has ended, however (one cut short is due again at once)."""
        self._sweeping = False

    def before_fork(self) -> None:
        """The child will have copies of the output views alive at the fork, over the
        same memory: their regions are never used again (a later call would write into
        what the child reads), and are freed once the parent's views are gone. (A fork
        that fails, or a child that runs another program at once, retires them too.)"""
        with self._lock:
            self._shared_with_child.update(self._on_loan)

    def after_fork_in_child(self) -> None:
        """A forked child's pool starts empty, with names of its own: the parent's
        regions (the same memory in both processes) stay the parent's to use and free."""
        self._start()

    def _start(self) -> None:
        self._swept = False
        self._sweeping = False
        self._still_stale = set()
        """Regions of dead processes that the server would not let go of yet (a request
        of theirs was still running there): asked for again, less and less often."""
        self._next_sweep = 0.0
        self._sweep_wait = CHECK_EVERY_S
        # Reentrant: a view's finalizer may run (garbage collection) while this thread
        # holds the lock.
        self._lock = threading.RLock()
        self._idle: dict[int, list[AnyRegion]] = {}
        self._idle_since: dict[AnyRegion, float] = {}
        self._taken_at: dict[int, float] = {}
        """When a region of each size was last taken."""
        self._next_trim = 0.0
        self._all: list[AnyRegion] = []
        self._serial = 0
        self._on_loan: set[AnyRegion] = set()
        """Regions whose memory output views use."""
        self._promised = 0
        """Output regions of calls in flight that may become views (see promise_loans)."""
        self._shared_with_child: weakref.WeakSet[AnyRegion] = weakref.WeakSet()
        """Regions lent to views when the process forked: never used again."""
        self._retired: list[AnyRegion] = []
        """Of those, the ones back from their views: still registered, for the next call
        to unregister and close (see surplus)."""
        self._abandoned: set[AnyRegion] = set()
        """Regions of calls that ended without an answer: never used again."""
        self._calls: list[tuple[AnyRegion, ...]] = []
        """The abandoned regions, by call (one request uses them all, or none)."""
        self._next_check = 0.0
        self._cut: set[AnyRegion] = set()
        self._next_cut_check = 0.0
        """Regions whose registration was cut off: never used again; unregistered (no
        request ever used them, so on any server) and closed at drain."""
        self._closing: set[AnyRegion] = set()
        """Regions no longer the pool's (drained, or lost by the server) that a call or a
        view still uses: closed when given back."""
        self._registrations = 0
        self._tag = f"{PREFIX}{HOST}-{os.getpid()}-{secrets.token_hex(3)}"

    def status_op(self) -> Op[list[JSON]]:
        """The op that lists the server's regions of this pool's kind."""
        return GetSystemSharedMemoryStatus() if self.device is None else GetCudaSharedMemoryStatus()

    def unregister_op(self, name: str) -> Op[None]:
        if self.device is None:
            return UnregisterSystemSharedMemory(name)
        return UnregisterCudaSharedMemory(name)

    def take(self, size: int) -> AnyRegion:
        """A region of at least ``size`` bytes; a new one is not registered yet."""
        capacity = max(_MIN_REGION, 1 << (size - 1).bit_length())
        with self._lock:
            self._taken_at[capacity] = time.monotonic()
            idle = self._idle.get(capacity)
            if idle:
                taken = idle.pop()  # (the last given back: the first ones grow surplus)
                self._idle_since.pop(taken, None)
                return taken
            self._serial += 1
            name = f"{self._tag}-{self._serial}"
        region: AnyRegion = (
            Region(name, capacity)
            if self.device is None
            else CudaRegion(name, capacity, self.device)
        )
        with self._lock:
            self._all.append(region)
        return region

    def holds_registrations(self) -> bool:
        """Whether any of the pool's regions is registered with the server."""
        with self._lock:
            return any(region.registered for region in self._all)

    def give_back(self, regions: Iterable[AnyRegion]) -> None:
        with self._lock:
            for region in regions:
                if region not in self._all:
                    # Drained or lost while a call or an output view held it.
                    if region in self._closing:
                        self._closing.discard(region)
                        # GPU memory of a call that may still run stays allocated.
                        if region.mapped or region not in self._abandoned:
                            region.close()
                    continue
                if region in self._abandoned or region in self._cut:
                    continue  # freed by forget() once the server lets go of it, or drain()
                shared = region in self._shared_with_child
                if region.registered and shared:
                    self._retired.append(region)
                elif region.registered:
                    self._idle.setdefault(region.size, []).append(region)
                    self._idle_since[region] = time.monotonic()
                else:
                    self._all.remove(region)
                    region.close()

    def surplus(self) -> list[AnyRegion]:
        """Idle regions that calls of their size passed over for SURPLUS_AFTER_S, taken
        out of the pool for the caller to unregister and close (at most a few, at most
        once per CHECK_EVERY_S). A client that calls now and then keeps its regions.
        GPU regions are kept until close. Regions retired at a fork come first, at once."""
        if self._retired:
            with self._lock:
                retired, self._retired = self._retired, []
                for region in retired:
                    self._all.remove(region)
            return retired
        now = time.monotonic()
        if now < self._next_trim or self.device is not None:  # (GPU memory: kept)
            return []
        surplus = []
        with self._lock:
            self._next_trim = now + CHECK_EVERY_S
            for size, idle in self._idle.items():
                for region in list(idle):
                    since = self._idle_since.get(region, now)
                    if since > now - SURPLUS_AFTER_S or self._taken_at.get(size, 0.0) <= since:
                        continue
                    idle.remove(region)
                    self._all.remove(region)
                    del self._idle_since[region]
                    surplus.append(region)
                    if len(surplus) == _SURPLUS_PER_CHECK:
                        return surplus
        return surplus

    def readmit(self, region: AnyRegion) -> None:
        """Take back an idle region :meth:`surplus` gave out whose unregistration failed."""
        with self._lock:
            self._all.append(region)
            if region in self._shared_with_child:
                self._retired.append(region)
                return
            self._idle.setdefault(region.size, []).append(region)
            self._idle_since[region] = time.monotonic()

    def promise_loans(self, count: int) -> bool:
        """Whether a call's ``count`` output regions may be handed out as views: the
        regions lent, with those promised to calls in flight, stay within MAX_LENT. Kept
        until the call's release."""
        with self._lock:
            if len(self._on_loan) + self._promised + count > MAX_LENT:
                return False
            self._promised += count
            return True

    def forgo_loans(self, count: int) -> None:
        """Take back a promise of :meth:`promise_loans` whose call was never made."""
        with self._lock:
            self._promised -= count

    def release(self, placement: Placement, *, abandoned: bool = False) -> None:
        """Take back the regions of a finished call; those lent to output views later.

        ``abandoned``: the call ended without an answer (a timeout, a cancellation, a
        connection lost once the request was out), or an attempt of it did before a
        retry. The server may still be running that request and write its outputs into
        these regions at any time, so they are never used again: :meth:`due_for_check`
        offers them for freeing until the server lets go of them.
        """
        idle = []
        with self._lock:
            self._promised -= placement.promised
            placement.promised = 0
            if abandoned:
                self._abandoned.update(placement.regions)
                self._calls.append(tuple(placement.regions))
            for slot in (*placement.inputs.values(), *placement.outputs.values()):
                if slot.lent is None:
                    idle.append(slot.region)
                else:
                    self._on_loan.add(slot.region)
                    weakref.finalize(slot.lent, self._returned, slot.region)
                    slot.lent = None
        self.give_back(idle)

    def _returned(self, region: AnyRegion) -> None:
        """The last view of a lent region is gone."""
        with self._lock:
            self._on_loan.discard(region)
        self.give_back((region,))

    def due_for_check(self, force: bool = False) -> list[tuple[AnyRegion, ...]]:
        """The abandoned regions that no output view uses, by call; at most once per
        CHECK_EVERY_S unless ``force`` (each check asks the server)."""
        if not self._abandoned:  # (the common case, decided without the lock)
            return []
        now = time.monotonic()
        with self._lock:
            if not self._abandoned or (now < self._next_check and not force):
                return []
            self._next_check = now + CHECK_EVERY_S
            self._calls = [call for call in self._calls if any(r in self._abandoned for r in call)]
            due = (
                tuple(r for r in call if r in self._abandoned and r not in self._on_loan)
                for call in self._calls
            )
            return [call for call in due if call]

    def abandoned(self) -> set[AnyRegion]:
        """The regions still abandoned (the server may still write into them)."""
        with self._lock:
            return set(self._abandoned)

    def forget(self, region: AnyRegion) -> None:
        """Close an abandoned region that the server no longer uses."""
        with self._lock:
            self._abandoned.discard(region)
            if region not in self._all:
                return  # drained: closed by the client's close()
            self._all.remove(region)
        region.close()

    def registered(self, region: AnyRegion) -> None:
        """The server has ``region`` now (or may have it: a registration cut off)."""
        with self._lock:
            self._registrations += 1
            region.registration = self._registrations
        region.registered = True

    def cut_off(self, region: AnyRegion) -> None:
        """A registration of ``region`` was cut off (a timeout, a cancellation, a lost
        connection): the server may have it or not, and its /dev/shm name is gone, so it
        cannot be registered again. Never used again; unregistered and closed by the
        client's next registration (see :meth:`cut_due`), or at drain (or closed once the
        server's list shows it gone, see :meth:`lost`)."""
        self.registered(region)
        with self._lock:
            self._cut.add(region)

    def cut_due(self) -> list[AnyRegion]:
        """The regions whose registration was cut off, to unregister and close: no
        request ever used them. At most once per CHECK_EVERY_S (each try asks the
        server, and a slow server is what cuts registrations off)."""
        if not self._cut:  # (the common case, decided without the lock)
            return []
        now = time.monotonic()
        with self._lock:
            if now < self._next_cut_check:
                return []
            self._next_cut_check = now + CHECK_EVERY_S
            return list(self._cut)

    def forget_cut(self, region: AnyRegion) -> None:
        """Close a cut-off region the server no longer has (unregistered, or never had)."""
        with self._lock:
            if region not in self._cut:
                return  # (drained, or freed by another call)
            self._cut.discard(region)
            self._all.remove(region)
        region.close()

    def registrations(self) -> int:
        """How many registrations there have been: :meth:`lost` takes it from before it
        asked the server for its list."""
        return self._registrations

    def lost(self, listed: Collection[str], before: int) -> None:
        """The server has none of the regions registered by registration ``before``
        that are missing from ``listed`` (it restarted, or something unregistered them).
        Their /dev/shm names are gone, so they cannot be registered again: those idle
        are closed, those a call or a view uses when given back. (A call that sends one
        meanwhile is refused by the server, and places its request anew.)"""
        with self._lock:
            gone = {
                region
                for region in self._all
                if region.registered
                and region.registration <= before
                and region.name not in listed
                and region not in self._abandoned  # (freed once the server lets go)
            }
            idle = [r for regions in self._idle.values() for r in regions if r in gone]
            for region in idle:
                self._idle[region.size].remove(region)
                self._idle_since.pop(region, None)
            idle += [region for region in self._retired if region in gone]
            self._retired = [region for region in self._retired if region not in gone]
            idle += [region for region in self._cut if region in gone]  # (no call has it)
            self._cut.difference_update(gone)
            for region in gone:
                self._all.remove(region)
            self._closing.update(gone.difference(idle))
        for region in idle:
            region.close()

    def drain(self) -> Drained:
        """Every region (to unregister and close), leaving the pool empty."""
        with self._lock:
            idle = {region for regions in self._idle.values() for region in regions}
            idle.update(self._retired)
            abandoned = set(self._abandoned)
            busy = set(self._all) - idle - self._on_loan - abandoned - self._cut
            self._closing.update(busy)
            drained = Drained(self._all, busy, abandoned)
            self._all, self._idle, self._cut, self._retired = [], {}, set(), []
            self._idle_since = {}
            self._abandoned, self._calls = set(), []
        return drained


@attrs.frozen
class Drained:
    """What :meth:`RegionPool.drain` took out of the pool."""

    regions: list[AnyRegion]
    busy: set[AnyRegion]
    """Used by calls in flight: each closes when its call gives it back (a blocking HTTP
    call goes on after its client closed, and reads its outputs)."""
    abandoned: set[AnyRegion]
    """Of calls that ended without an answer: the server may still write into them."""


def stale_regions(status: Iterable[Mapping[str, Any]]) -> list[str]:
    """Regions of this host registered by processes that are gone."""
    return [name for entry in status if _left_by_the_dead(name := str(entry.get("name", "")))]


def remove_stale_files() -> None:
    """Remove the /dev/shm files of regions that processes of this host made and died
    before the server had mapped them (files are unlinked once it has)."""
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return
    for name in names:
        if _left_by_the_dead(name):
            with contextlib.suppress(OSError):  # gone already, or not ours to remove
                os.unlink(f"/dev/shm/{name}")


def _left_by_the_dead(name: str) -> bool:
    """Whether ``name`` is a region that a process of this tag (host and PID namespace)
    made, and that process is gone."""
    parts = name.split("-")
    if not name.startswith(PREFIX) or len(parts) < 5 or parts[1] != HOST:
        return False
    try:
        pid = int(parts[2])
    except ValueError:
        return False
    return pid != os.getpid() and not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@attrs.define
class Slot:
    """Where one tensor lives in a region."""

    region: AnyRegion
    offset: int
    byte_size: int
    view: bool = False
    """An output handed out as a view of the region rather than copied."""
    lent: np.ndarray[Any, Any] | None = None
    """The array over the region that the output's views share, once read."""


@attrs.define
class Placement:
    """Which inputs and outputs of one request go through regions, and where."""

    inputs: dict[str, Slot]
    outputs: dict[str, Slot]
    promised: int = 0
    """Output views promised to this call (see RegionPool.promise_loans), until release."""
    resent: bool = False
    """The request was sent again after an attempt that may have run: that attempt may
    still write into these regions."""

    @property
    def regions(self) -> list[AnyRegion]:
        seen: dict[str, AnyRegion] = {}
        for slot in (*self.inputs.values(), *self.outputs.values()):
            seen[slot.region.name] = slot.region
        return list(seen.values())


def _sample_bytes(datatype: str, shape: tuple[int, ...]) -> int | None:
    """The byte size of one sample of a tensor, when the model fixes it (never for BYTES)."""
    dtype = DATATYPES.get(datatype)
    if datatype == "BYTES" or dtype is None or any(dim < 0 for dim in shape):
        return None  # (an unknown datatype fails when the call is made, not here)
    return math.prod(shape) * dtype.itemsize


_OUTGREW: Final = re.compile(
    r"shared memory size specified with the request for output '(?P<name>[^']*)' "
    r"\(\d+ bytes\) should be at least (?P<needed>\d+) bytes"
)


def _input_bytes(request: InferRequest) -> int:
    return max(1, sum(tensor.array.nbytes for tensor in request.inputs))


class PlacementPlan:
    """What shared memory could carry for one model, worked out once per model handle.

    ``sockets_only`` is true when no input or output of any request can reach the
    threshold (every shape is fixed and small): in "auto" mode such a model's calls skip
    :func:`place`.

    An output whose size the config leaves open (a ``-1`` axis besides the batch) is sized
    from earlier answers: the plan keeps, per such output, the most bytes it has returned
    per byte of input (``open_outputs``), and gives it a region only once a call has shown
    its size. Models with sequence batching keep theirs on the socket: an answer that
    outgrows its region has to be computed again (see :meth:`outgrown`), which a stateful
    model must not do.
    """

    __slots__ = (
        "__weakref__",
        "_largest",
        "_lock",
        "_output_bytes",
        "open_outputs",
        "sockets_only",
        "spec",
        "threshold",
    )

    def __init__(self, spec: ModelSpec, threshold: int = DEFAULT_THRESHOLD) -> None:
        self.spec = spec
        self.threshold = threshold
        self._output_bytes = {
            name: _sample_bytes(output.datatype, output.shape)
            for name, output in spec.outputs.items()
        }
        self.open_outputs: dict[str, float] = (
            {}
            if spec.sequence or spec.decoupled
            else {
                name: 0.0
                for name, output in spec.outputs.items()
                if output.datatype in DATATYPES
                and output.datatype != "BYTES"
                and self._output_bytes[name] is None
            }
        )
        self._largest = dict.fromkeys(self.open_outputs, 0)
        self._lock = threading.Lock()
        renew_lock_on_fork(self)
        samples = max(spec.max_batch_size, 1)  # larger batches are split into chunks
        inputs = [
            _sample_bytes(tensor.datatype, tensor.shape)
            for tensor in spec.inputs.values()
            if tensor.datatype != "BYTES"
        ]
        self.sockets_only = (
            not self.open_outputs
            and all(size is not None and size * samples < threshold for size in inputs)
            and all(
                size * samples < threshold
                for size in self._output_bytes.values()
                if size is not None
            )
        )

    def output_bytes(self, name: str, batch: int) -> int | None:
        """The byte size of an output of a ``batch``, when the model fixes it."""
        per_sample = self._output_bytes.get(name)
        return None if per_sample is None else per_sample * batch

    def estimate(self, name: str, input_bytes: int) -> int:
        """The bytes an output of open size is expected to take for ``input_bytes`` of
        input: by the most it returned per byte of input, and at most twice the most it
        ever returned (one answer to a tiny input must not size regions of gigabytes)."""
        return min(math.ceil(self.open_outputs[name] * input_bytes), 2 * self._largest[name])

    def learn(self, request: InferRequest, result: InferResult, forced: bool = False) -> None:
        """Note how large the outputs of open size came back for this request's inputs.

        Outside ``forced`` modes, answers far below the threshold are not noted: a small
        answer's ratio to its input (a fixed header, say) would size later regions wrong.
        """
        input_bytes = 0
        floor = 0 if forced else self.threshold // 4
        for name in self.open_outputs:
            size = result._byte_size(name)
            if size is None or size < floor or size <= self._largest[name]:
                continue
            input_bytes = input_bytes or _input_bytes(request)
            self._note(name, size, input_bytes)

    def _note(self, name: str, size: int, input_bytes: int) -> None:
        with self._lock:  # concurrent calls: each value only grows
            self.open_outputs[name] = max(self.open_outputs[name], size / input_bytes)
            self._largest[name] = max(self._largest[name], size)

    def outgrown(self, error: Exception, request: InferRequest, placement: Placement) -> bool:
        """Whether ``error`` is the server refusing an answer too large for the region
        that an output of open size was given; the plan then sizes it from the answer."""
        match = _OUTGREW.search(str(error))
        if match is None or not request.idempotent:
            return False
        name = match["name"]
        if name not in self.open_outputs or name not in placement.outputs:
            return False
        self._note(name, int(match["needed"]), _input_bytes(request))
        return True


def place(
    request: InferRequest,
    plan: PlacementPlan,
    pool: RegionPool,
    views: bool = False,
    estimated: bool = True,
    forced: bool = False,
) -> tuple[InferRequest, Placement] | None:
    """The request with its large tensors (every one, when ``forced``) in regions of
    ``pool``, or None if none is.

    ``estimated=False`` keeps outputs of open size on the socket (a call that must not run
    twice). ``forced`` (the modes that name a kind of memory) places every numeric tensor
    whose size is known, however small. Runs on every call of a client whose mode allows
    shared memory (unless the plan says the model's tensors are all small), so the common
    case, nothing large, is decided without allocating.
    """
    threshold = 1 if forced else plan.threshold
    large = [
        tensor
        for tensor in request.inputs
        if tensor.array.nbytes >= threshold and tensor.datatype != "BYTES"
    ]
    batch = request.inputs[0].array.shape[0] if plan.spec.batched and request.inputs else 1
    wanted = (
        [output.name for output in request.outputs]
        if request.outputs is not None
        else list(plan.spec.outputs)
    )
    sizes = {}
    open_sizes = set()
    open_outputs = plan.open_outputs if estimated else {}
    input_bytes = _input_bytes(request) if open_outputs else 0
    for name in wanted:
        size = plan.output_bytes(name, batch)
        if size is None and name in open_outputs:
            size = plan.estimate(name, input_bytes)
            open_sizes.add(name)
        if size is not None and size >= threshold:
            sizes[name] = size
    if not large and not sizes:
        return None
    inputs: dict[str, Slot] = {}
    outputs: dict[str, Slot] = {}
    promised = min(len(sizes), MAX_LENT)  # (a call with more outputs may lend them all)
    views = views and pool.device is None and bool(sizes) and pool.promise_loans(promised)
    taken: list[AnyRegion] = []
    try:
        for tensor in large:
            array = tensor.array
            taken.append(region := pool.take(array.nbytes))
            region.write(array)
            inputs[tensor.name] = Slot(region, 0, array.nbytes)
        for name, size in sizes.items():
            taken.append(region := pool.take(size))
            # An output of open size may fill its region: the server checks that it fits.
            outputs[name] = Slot(region, 0, region.size if name in open_sizes else size, views)
    except BaseException:
        pool.give_back(taken)
        if views:
            pool.forgo_loans(promised)
        raise
    requested = request.outputs
    if outputs and requested is None:
        requested = tuple(RequestedOutput(name) for name in wanted)
    placement = Placement(inputs, outputs, promised=promised if views else 0)
    return attrs.evolve(request, outputs=requested, shared_memory=placement), placement


def note_resend(op: object, error: TritonError) -> None:
    """``op`` is sent again after ``error``: if that attempt may have run, it may still
    write its outputs into the regions, so the answer's outputs are copied out of them."""
    if error.may_have_run and isinstance(op, InferRequest) and op.shared_memory is not None:
        op.shared_memory.resent = True
        for slot in op.shared_memory.outputs.values():
            slot.view = False


def guards_regions_in_use(metadata: Mapping[str, Any]) -> bool:
    """Whether the server (its ``server_metadata``) keeps a region a request uses when
    asked to unregister it: Triton from 2.50 refuses (2.52: defers) that. Older servers
    unmap it under the request, which can crash them."""
    version = re.match(r"(\d+)\.(\d+)", str(metadata.get("version", "")))
    if str(metadata.get("name")) != "triton" or version is None:
        return False
    return (int(version[1]), int(version[2])) >= (2, 50)


# Words of a stream that broke under the call (a proxy's reset, a connection going away):
# what the server does with the request then is unknown.
_BROKEN_STREAM: Final = ("rst_stream", "stream removed", "stream reset", "goaway")


_NO_REGION: Final = re.compile(r"Unable to find shared memory region: '(?P<name>[^']*)'")


def regions_lost(error: TritonError, placement: Placement) -> bool:
    """Whether ``error`` says the server does not have a region of ``placement`` (it
    restarted, or something unregistered the client's regions). Triton refuses such a
    request before running it."""
    match = _NO_REGION.search(str(error)) if isinstance(error, InferenceError) else None
    return match is not None and any(r.name == match["name"] for r in placement.regions)


def may_still_run(error: TritonError, placement: Placement) -> bool:
    """Whether the server may still be running a placed request after ``error`` ended
    its call (or after an attempt that was resent)."""
    if error.may_have_run or placement.resent or error.status in ("CANCELLED", "UNKNOWN"):
        return True
    lowered = error.message.lower()
    return any(words in lowered for words in _BROKEN_STREAM)
