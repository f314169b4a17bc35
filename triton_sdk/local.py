"""A real Triton server on this machine, for notebooks, demos and tests.

>>> from triton_sdk.local import LocalServer
>>> with LocalServer("model_repository") as server:            # doctest: +SKIP
...     client = ts.Client(server.grpc_url)

The server is the binary ``TRITONSERVER_PATH`` names, or the ``tritonserver`` shipped in
the ``nvidia-pytriton`` wheel: installed here, or else installed apart on first use
(:func:`install_server`). It listens on free loopback ports only. Python-backend models
run in the environment of the running interpreter unless ``python_env`` (or
``TRITON_SDK_PYTHON_ENV``) names another; that environment needs numpy 1.x, because the
backend utilities shipped with the server mis-decode BYTES tensors under numpy 2, so under
numpy 2 they get one of their own (:func:`models_environment`).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import http.client
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs
import numpy as np

from ._checks import numpy_number, shown
from ._errors import TritonError
from ._fork import on_fork

if TYPE_CHECKING:
    from ._async_client import AsyncClient
    from ._client import Client

__all__ = ["LocalServer", "ServerStartError", "TritonInstallation", "find_tritonserver"]

StrPath = str | os.PathLike[str]

_EXIT_TIMEOUT_SECONDS: Final = 5
_START_ATTEMPTS: Final = 3
# The Python backend sometimes aborts on this while its models load, under load
# (triton-inference-server/server#8882); the same start succeeds when tried again.
_KNOWN_START_CRASH: Final = "boost::interprocess::lock_exception"
# How tritonserver says a port is taken: "Socket '127.0.0.1:P' already in use" (HTTP,
# gRPC, metrics), "Address already in use" (gRPC).
_PORT_CLASH: Final = "already in use"


def _taken_ports(log: Path) -> str:
    """The log's lines that say a port was taken, for the front of a message (the log's
    tail follows: a one-line report would bury them at its end)."""
    lines = [line.strip() for line in _tail(log, 200).splitlines() if _PORT_CLASH in line.lower()]
    return f" ({'; '.join(dict.fromkeys(lines))})" if lines else ""


# The Python backend starts each stub with `bash -c "exec STUB MODEL_PATH ..."`, unquoted:
# a path with a space, `$`, non-ASCII or other shell characters breaks (or runs) there.
_PLAIN_PATH: Final = re.compile(r"[A-Za-z0-9_./-]+")


class ServerStartError(TritonError, RuntimeError):
    """The server could not be found or did not become ready; the message ends with its log."""


@attrs.frozen(kw_only=True)
class TritonInstallation:
    """Where the server's files are.

    Attributes:
        binary: the ``tritonserver`` executable.
        backends: the backend directory that comes with it.
        python_stub: the Python-backend stub for the running Python, when it has to be
            put in place (the wheel ships one stub per Python version).
        library_dirs: shared-library directories the binary needs.
    """

    binary: Path
    backends: Path
    python_stub: Path | None = None
    library_dirs: tuple[Path, ...] = ()


def find_tritonserver() -> TritonInstallation:
    """Locate the server: ``TRITONSERVER_PATH``, else the nvidia-pytriton wheel installed
    here, else a private copy of it (installed now if needed)."""
    explicit = os.environ.get("TRITONSERVER_PATH")
    if explicit:
        binary = Path(explicit)
        if binary.is_dir():
            binary = binary / "bin" / "tritonserver"
        if not binary.is_file():
            raise ServerStartError(f"TRITONSERVER_PATH names no tritonserver binary: {explicit}")
        return TritonInstallation(binary=binary, backends=binary.parent.parent / "backends")
    spec = importlib.util.find_spec("pytriton")
    if spec is not None and spec.submodule_search_locations:
        package = Path(next(iter(spec.submodule_search_locations)))
    else:
        package = install_server() / "pytriton"
    root = package / "tritonserver"
    binary = root / "bin" / "tritonserver"
    if not binary.is_file():
        raise ServerStartError(f"the nvidia-pytriton package has no server binary at {binary}")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / version / "triton_python_backend_stub"
    libs = package.parent / "nvidia_pytriton.libs"
    return TritonInstallation(
        binary=binary,
        backends=root / "backends",
        python_stub=stub if stub.is_file() else None,
        library_dirs=(libs,) if libs.is_dir() else (),
    )


def _free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _plain(path: Path) -> bool:
    return _PLAIN_PATH.fullmatch(str(path)) is not None


def _plain_path(path: Path, link: Path) -> Path:
    """``path``, or when the Python backend's shell command cannot carry it, ``link`` to it."""
    if _plain(path):
        return path
    link.symlink_to(path, target_is_directory=True)
    return link


def _make_workdir() -> Path:
    """A new work folder with a plain path: in the temporary directory, else (when that
    path is not plain) in /tmp or the cache."""
    for parent in (Path(tempfile.gettempdir()), Path("/tmp"), cache_root() / "run"):
        if _plain(parent):
            with contextlib.suppress(OSError):
                parent.mkdir(parents=True, exist_ok=True)
                return Path(tempfile.mkdtemp(prefix="triton_sdk-", dir=parent))
    raise ServerStartError(
        "no work folder with a plain path (letters, digits, _-./) for the Python backend: "
        "set TMPDIR or TRITON_SDK_CACHE to one"
    )


def _backend_directory(installation: TritonInstallation, into: Path) -> Path:
    """A backend directory whose Python backend has the stub for the running Python.

    The installed files are linked, not copied: the wheel's own tree may be read-only.
    """
    target = into / "backends"
    if installation.python_stub is None:
        return _plain_path(installation.backends, target)
    for backend in installation.backends.iterdir():
        if backend.is_dir():
            (target / backend.name).mkdir(parents=True)
            for item in backend.iterdir():
                (target / backend.name / item.name).symlink_to(item)
    python = target / "python"
    python.mkdir(exist_ok=True)
    (python / installation.python_stub.name).symlink_to(installation.python_stub)
    return target


SERVER_PACKAGE: Final = "nvidia-pytriton>=0.5"
"""Where the server binary comes from: a wheel that bundles tritonserver and its Python
backend. Its own metadata pins numpy<2, so it is installed apart (``--no-deps``) rather
than into the user's environment."""


def cache_root() -> Path:
    """Where LocalServer keeps what it installs: ``$TRITON_SDK_CACHE`` or
    ``~/.cache/triton_sdk``."""
    return Path(os.environ.get("TRITON_SDK_CACHE") or Path.home() / ".cache" / "triton_sdk")


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """One process at a time installs into ``root``; the others wait, then reuse it."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _run_step(step: list[str], why: str) -> None:
    done = subprocess.run(step, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ServerStartError(f"{why} ({' '.join(step)}): {done.stderr.strip()[-500:]}")


def _made_once(target: Path, make: Callable[[Path], None]) -> Path:
    """``target``, made by ``make`` the first time (one process at a time, under a lock
    in the cache; a half-made one is started again) and reused after."""
    ready = target / ".ready"
    if ready.is_file():
        return target
    with _locked(cache_root()):
        if not ready.is_file():
            shutil.rmtree(target, ignore_errors=True)
            make(target)
            ready.touch()
    return target


def install_server() -> Path:
    """The folder of a private copy of the server's wheel, installed there with pip on
    first use (a package registry must be reachable) and reused after. Returns the
    folder that holds the ``pytriton`` package."""

    def install(target: Path) -> None:
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
        _run_step(
            [*pip, "--target", str(target), SERVER_PACKAGE],
            "no tritonserver found, and installing one failed: set TRITONSERVER_PATH to a "
            "tritonserver binary, or make a package registry reachable",
        )

    return _made_once(cache_root() / "server", install)


def models_environment(python_env: Path | None) -> Path | None:
    """Where Python-backend models run: ``python_env`` when given; else the running
    environment when its numpy is 1.x; else (numpy 2 here) a small environment of its
    own with numpy 1, made once and kept (see :func:`numpy1_environment`)."""
    if python_env is not None:
        return python_env
    from importlib.metadata import PackageNotFoundError, version

    try:
        major = int(version("numpy").split(".")[0])
    except PackageNotFoundError:
        return None
    return None if major < 2 else numpy1_environment()


def numpy1_environment() -> Path:
    """A virtual environment with numpy 1 for the server's Python backend, which is built
    against numpy 1 (under numpy 2 its models fail). It also sees the running
    environment's packages, after its own numpy. Made on first use with pip (a registry
    must be reachable) in ``$TRITON_SDK_CACHE`` or ``~/.cache/triton_sdk``, then reused."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return _made_once(cache_root() / f"models-py{version}-numpy1", _make_numpy1_environment)


def _make_numpy1_environment(target: Path) -> None:
    python = target / "bin" / "python"
    why = (
        "the server's Python models need numpy 1, and this environment has numpy 2; "
        "making an environment for them failed. Make one with numpy<2 and set "
        "TRITON_SDK_PYTHON_ENV (or LocalServer(python_env=...)) to it"
    )
    _run_step([sys.executable, "-m", "venv", str(target)], why)
    _run_step([str(python), "-m", "pip", "install", "--quiet", "numpy>=1.21,<2"], why)
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = [path for path in sys.path if path.endswith("site-packages")]
    Path(site, "triton_sdk_running_env.pth").write_text("\n".join(ours) + "\n")


def _server_environment(
    installation: TritonInstallation, python_env: Path | None
) -> dict[str, str]:
    """The environment traps of running the wheel's server, handled.

    - The Python stub links libpython: the running interpreter's library directory goes
      first on LD_LIBRARY_PATH, or the stub picks up the system's libpython.
    - The stub finds its Python environment (and numpy) through ``python3`` on PATH.
    """
    env = dict(os.environ)
    libdir = sysconfig.get_config_var("LIBDIR")
    library_path = [str(path) for path in (libdir, *installation.library_dirs) if path]
    if env.get("LD_LIBRARY_PATH"):
        library_path.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(library_path)
    if python_env is not None:
        bin_dir = python_env / "bin"
        env["VIRTUAL_ENV"] = str(python_env)
    else:
        bin_dir = Path(sys.executable).parent
        if sys.prefix != sys.base_prefix:
            env["VIRTUAL_ENV"] = sys.prefix
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    env.pop("PYTHONHOME", None)
    return env


def _ready(host: str, port: int) -> bool:
    connection = http.client.HTTPConnection(host, port, timeout=1.0)
    try:
        connection.request("GET", "/v2/health/ready")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def _listening_ports(pid: int) -> set[int] | None:
    """The TCP ports the process ``pid`` listens on (Linux ``/proc``); None when its
    descriptors cannot be read (a sandbox), so that readiness is judged without them."""
    inodes = set()
    try:
        descriptors = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return None
    for fd in descriptors:
        with contextlib.suppress(OSError):
            link = os.readlink(fd)
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            next(lines, None)
            for line in lines:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _values(args: Sequence[str], option: str) -> Iterator[str]:
    """The values ``args`` give ``option`` (``--option value`` or ``--option=value``, the
    option maybe cut short: see :func:`_names`)."""
    for index, arg in enumerate(args):
        given, equals, value = str(arg).partition("=")
        if not _names(given, option):
            continue
        if equals:
            yield value
        elif index + 1 < len(args):
            yield str(args[index + 1])


def _switched_off(args: Sequence[str], option: str) -> bool:
    """Whether ``args`` turn ``option`` (``--allow-http`` and so on) off."""
    return any(
        value.strip().lower() in ("false", "0", "no", "off") for value in _values(args, option)
    )


_LOAD_FAILED: Final = "failed to load all models"


def _checked_arguments(
    ports: object, startup_timeout: object, log_verbose: object
) -> tuple[int, int, int] | None:
    """``ports`` as Python ints; refused, before anything starts, what tritonserver would
    refuse late (with its usage text) or take otherwise than meant (a port past 65535
    wraps around)."""
    checked = None
    if ports is not None:
        given: Any = ports
        if isinstance(given, np.ndarray) and given.ndim == 1:
            given = given.tolist()
        fit = isinstance(given, Sequence) and not isinstance(given, str | bytes | bytearray)
        fit = fit and len(given) == 3
        if not fit or not all(_is_int(port) and 1 <= port <= 65535 for port in given):
            raise ServerStartError(
                f"ports is a tuple (http, grpc, metrics) of ports 1-65535, got {shown(ports)}"
            )
        checked = (int(given[0]), int(given[1]), int(given[2]))
        if len(set(checked)) != 3:
            raise ServerStartError(f"ports must be three different ports, got {shown(ports)}")
    number = numpy_number(startup_timeout, integer=False) or (
        isinstance(startup_timeout, int | float) and not isinstance(startup_timeout, bool)
    )
    if not number or not startup_timeout > 0:  # type: ignore[operator]
        raise ServerStartError(
            f"startup_timeout is a number of seconds above 0, got {shown(startup_timeout)}"
        )
    if not _is_int(log_verbose) or log_verbose < 0:  # type: ignore[operator]
        raise ServerStartError(f"log_verbose is an int of 0 or more, got {shown(log_verbose)}")
    return checked


def _is_int(value: object) -> bool:
    return numpy_number(value, integer=True) or (
        isinstance(value, int) and not isinstance(value, bool)
    )


def _restricts_http_health(args: Sequence[str]) -> bool:
    """Whether ``args`` restrict HTTP's health API to requests with a key
    (``--http-restricted-api=health,metadata:key=value``)."""
    return any(
        "health" in (api.strip().lower() for api in value.partition(":")[0].split(","))
        for value in _values(args, "--http-restricted-api")
    )


def _tail(path: Path, lines: int = 40) -> str:
    if lines <= 0:  # (text.splitlines()[-0:] is every line)
        return ""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


# Where LocalServer has the server listen: given again in extra_args, tritonserver would
# take the last value, and the server would not be where LocalServer waits for it.
_MANAGED_OPTIONS: Final = (
    "--model-control-mode",  # (model_control=; "explicit" adds --load-model=*)
    "--http-port",
    "--grpc-port",
    "--metrics-port",
    "--http-address",
    "--grpc-address",
    "--metrics-address",
)


def _managed_option(arg: str) -> str | None:
    """The option of :data:`_MANAGED_OPTIONS` that ``arg`` sets, if any; also when it is
    abbreviated, as tritonserver's getopt_long takes ``--http-po=1`` for ``--http-port``."""
    option = arg.split("=", 1)[0]
    return next((managed for managed in _MANAGED_OPTIONS if _names(option, managed)), None)


def _names(given: str, option: str) -> bool:
    """Whether ``given`` (without its ``=value``) names ``option``, in full or cut short,
    as getopt_long takes it (``--http-po`` for ``--http-port``; a prefix of two options
    tritonserver refuses itself)."""
    return given.startswith("--") and len(given) > 2 and option.startswith(given)


_MODEL_CONTROL: Final = ("explicit", "none", "poll")


# Kills the server's process group once its stdin closes: when the LocalServer stops it,
# or when this Python process dies without stopping it (SIGKILL, a crash), so that no
# tritonserver outlives the program that started it. It then removes the Python backend's
# shared-memory files, which a killed server leaves in /dev/shm, and, when the program died
# (the LocalServer says "stopped" first otherwise), the server's temporary folder.
_WATCHDOG: Final = """
import glob, os, shutil, signal, sys, time
told = sys.stdin.buffer.read()
group = int(sys.argv[1])
try:
    os.killpg(group, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # until the group is gone (an unreaped one lingers)
        os.killpg(group, 0)
        time.sleep(0.05)
except (ProcessLookupError, PermissionError):
    pass
if sys.argv[3]:
    for path in glob.glob("/dev/shm/" + glob.escape(sys.argv[3]) + "*"):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
if not told and sys.argv[2]:
    shutil.rmtree(sys.argv[2], ignore_errors=True)
"""
_STOPPED: Final = b"stopped"
"""What a LocalServer tells its watchdog before it lets it go: it cleans up itself."""
# The Python backend's option naming its /dev/shm files; each server gets a prefix of its own.
_BACKEND_SHM_PREFIX_OPTION: Final = "shm-region-prefix-name"


def _start_watchdog(
    pid: int, workdir: Path | None, backend_shm_prefix: str | None
) -> subprocess.Popen[bytes]:
    folder = "" if workdir is None else str(workdir)
    return subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(pid), folder, backend_shm_prefix or ""],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )


_running: weakref.WeakSet[LocalServer] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for server in list(_running):
        server.stop()


class LocalServer:
    """A ``tritonserver`` process on free loopback ports, serving a model repository.

    Use it as a context manager (or call :meth:`start` and :meth:`stop`). It waits until
    the server reports ready, writes the server's log to ``log_path`` and raises
    :class:`ServerStartError`, with the log's tail, when the server cannot start.

    Args:
        repository: the model repository (``REPO/MODEL/config.pbtxt``, ``REPO/MODEL/1/...``).
        model_control: the server's ``--model-control-mode``. ``"explicit"`` (the default)
            loads every model at start and allows ``load_model``/``unload_model``.
        startup_timeout: seconds to wait for the server to become ready.
        log_path: where the server log goes; a temporary file when not given.
        python_env: the environment Python-backend models run in (a virtualenv or
            installation prefix); default: ``TRITON_SDK_PYTHON_ENV`` or the running one.
        log_verbose: the server's ``--log-verbose`` level.
        extra_args: more ``tritonserver`` arguments.
        host: the loopback address the server listens on (``127.0.0.2`` and so on: several
            servers on one port, as the addresses of one DNS name).
        ports: the HTTP, gRPC and metrics ports; free ones when not given.
    """

    def __init__(
        self,
        repository: StrPath,
        *,
        model_control: Literal["explicit", "none", "poll"] = "explicit",
        startup_timeout: float = 120.0,
        log_path: StrPath | None = None,
        python_env: StrPath | None = None,
        log_verbose: int = 0,
        extra_args: Sequence[str] = (),
        host: str = "127.0.0.1",
        ports: tuple[int, int, int] | None = None,
    ) -> None:
        if not host.startswith("127."):
            raise ServerStartError(f"a LocalServer listens on loopback only, got host {host!r}")
        if isinstance(extra_args, str):
            raise TypeError(
                f"extra_args must be a sequence of arguments, not a str: [{extra_args!r}]"
            )
        if _switched_off(extra_args, "--allow-http"):
            raise ServerStartError(
                "a LocalServer needs the HTTP endpoint to tell when the server is ready: "
                "--allow-http=false is not supported"
            )
        if _restricts_http_health(extra_args):
            raise ServerStartError(
                "a LocalServer asks the HTTP health API when the server is ready: "
                "--http-restricted-api may not restrict health (restrict it over gRPC, "
                "or restrict the other APIs)"
            )
        for arg in extra_args:
            option = _managed_option(str(arg))
            if option is not None:
                raise ServerStartError(
                    f"a LocalServer sets {option} itself: use its arguments (ports=, host=, "
                    "model_control=) rather than extra_args"
                )
        if model_control not in _MODEL_CONTROL:
            raise ServerStartError(
                f"model_control is one of {', '.join(_MODEL_CONTROL)}, got {model_control!r}"
            )
        ports = _checked_arguments(ports, startup_timeout, log_verbose)
        self.repository: Path = Path(repository).resolve()
        self.host: str = host
        self.model_control: Literal["explicit", "none", "poll"] = model_control
        self.startup_timeout: float = startup_timeout
        # Absolute: the log keeps its place if the program changes its working directory.
        self._log_path = Path(log_path).absolute() if log_path is not None else None
        env_default = os.environ.get("TRITON_SDK_PYTHON_ENV")
        chosen = python_env if python_env is not None else env_default or None
        self.python_env: Path | None = Path(chosen) if chosen else None
        self.log_verbose: int = log_verbose
        self.extra_args: tuple[str, ...] = tuple(extra_args)
        self._process: subprocess.Popen[bytes] | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        self._ports: tuple[int, int, int] | None = ports
        self._given_ports = ports
        self._fresh_ports = False
        """After stop(), ports nobody chose are picked anew at the next start."""
        self._exited_with: int | None = None
        self._backend_shm_prefix: str | None = None
        on_fork(self)

    # Addresses

    def _port(self, index: int) -> int:
        if self._ports is None:
            raise ServerStartError("the server has not been started")
        return self._ports[index]

    @property
    def http_port(self) -> int:
        """The port of its HTTP endpoint on ``host`` (picked free at start unless given)."""
        return self._port(0)

    @property
    def grpc_port(self) -> int:
        """The port of its gRPC endpoint on ``host`` (picked free at start unless given)."""
        return self._port(1)

    @property
    def metrics_port(self) -> int:
        """The port of its metrics endpoint on ``host`` (picked free at start unless given)."""
        return self._port(2)

    @property
    def grpc_url(self) -> str:
        """``grpc://127.0.0.1:PORT`` (its ``host``)."""
        return f"grpc://{self.host}:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        """``http://127.0.0.1:PORT`` (its ``host``)."""
        return f"http://{self.host}:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        """``http://127.0.0.1:PORT/metrics`` (its ``host``; Prometheus text format)."""
        return f"http://{self.host}:{self.metrics_port}/metrics"

    @property
    def log_path(self) -> Path:
        """The file the server's output goes to."""
        if self._log_path is None:
            if getattr(self, "_log_removed", False):
                raise ServerStartError(
                    "the server's log was removed when it stopped (stop(keep_log=True) keeps it)"
                )
            raise ServerStartError("the server has not been started")
        return self._log_path

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def exit_code(self) -> int | None:
        """The server's exit code once it has exited on its own (a crash, :meth:`kill`, a
        failed start); else ``None``."""
        return self._process.poll() if self._process is not None else self._exited_with

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs, else ``None``."""
        return self._process.pid if self.running and self._process is not None else None

    def client(self, protocol: Literal["grpc", "http"] = "grpc", **options: Any) -> Client:
        """A :class:`~triton_sdk.Client` for this server, its metrics URL filled in."""
        from ._client import Client

        url = self.grpc_url if protocol == "grpc" else self.http_url
        return Client(url, **{"metrics_url": self.metrics_url, **options})

    def async_client(
        self, protocol: Literal["grpc", "http"] = "grpc", **options: Any
    ) -> AsyncClient:
        """An :class:`~triton_sdk.AsyncClient` for this server, its metrics URL filled in."""
        from ._async_client import AsyncClient

        url = self.grpc_url if protocol == "grpc" else self.http_url
        return AsyncClient(url, **{"metrics_url": self.metrics_url, **options})

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the server log."""
        return _tail(self.log_path, lines)

    def __repr__(self) -> str:
        where = f" grpc={self._ports[1]} http={self._ports[0]}" if self._ports else ""
        return f"<LocalServer {str(self.repository)!r}{where}>"

    # Lifetime

    def start(self) -> LocalServer:
        """Start the server and wait until it is ready. Returns the server.

        A server that runs already is returned as it is; one that exited (a crash) is
        cleaned up and started again, on the same ports.
        """
        if self._process is not None:
            if self._process.poll() is None:
                return self
            self._cleanup_process()
            self._remove_workdir()
        if not self.repository.is_dir():
            raise ServerStartError(f"model repository {self.repository} is not a directory")
        chosen = self.python_env
        pythons = ("python", "python3")
        if chosen is not None and not any((chosen / "bin" / n).exists() for n in pythons):
            raise ServerStartError(
                f"python_env (or TRITON_SDK_PYTHON_ENV) {chosen} is not a Python "
                "environment: it has no bin/python"
            )
        self._remove_workdir()  # what a kill() left behind
        installation = find_tritonserver()
        self._workdir = workdir = _make_workdir()
        try:
            return self._start_in(installation, workdir)
        except ServerStartError:
            self._cleanup_process()
            # The error names the log: keep it, drop the rest of the work folder.
            self._remove_workdir(keep_log=True)
            self._fresh_ports = self._given_ports is None
            raise
        except BaseException:  # KeyboardInterrupt too: no server or folder is left behind
            self._cleanup_process()
            self._remove_workdir()
            self._fresh_ports = self._given_ports is None
            raise

    def _start_in(self, installation: TritonInstallation, workdir: Path) -> LocalServer:
        own_prefix = f"triton_sdk_python_backend_{workdir.name.removeprefix('triton_sdk-')}_"
        chosen = any(_BACKEND_SHM_PREFIX_OPTION in arg for arg in self.extra_args)
        self._backend_shm_prefix = None if chosen else own_prefix
        if self._log_path is None:
            self._log_path = workdir / "tritonserver.log"
        repository = _plain_path(self.repository, workdir / "repository")
        backends = _backend_directory(installation, workdir)
        env = _server_environment(installation, models_environment(self.python_env))
        keep_ports = None if self._fresh_ports else self._ports
        self._fresh_ports = False
        self._exited_with = None
        for attempt in range(_START_ATTEMPTS):
            ports = keep_ports or tuple(_free_ports(3, self.host))
            self._ports = (ports[0], ports[1], ports[2])
            try:
                self._launch(self._command(installation, repository, backends), env)
                return self
            except ServerStartError:
                log = _tail(self.log_path, 200)
                port_clash = _PORT_CLASH in log.lower() and keep_ports is None
                known_crash = _KNOWN_START_CRASH in log
                if not (port_clash or known_crash) or attempt == _START_ATTEMPTS - 1:
                    raise
                self._cleanup_process()
        raise AssertionError("unreachable")

    def _command(
        self, installation: TritonInstallation, repository: Path, backends: Path
    ) -> list[str]:
        command = [
            str(installation.binary),
            f"--model-repository={repository}",
            f"--backend-directory={backends}",
            f"--http-address={self.host}",
            f"--grpc-address={self.host}",
            f"--metrics-address={self.host}",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            f"--exit-timeout-secs={_EXIT_TIMEOUT_SECONDS}",
            f"--model-control-mode={self.model_control}",
            f"--log-verbose={self.log_verbose}",
        ]
        if self.model_control == "explicit":
            command.append("--load-model=*")
        if self._backend_shm_prefix is not None:
            option = f"{_BACKEND_SHM_PREFIX_OPTION}={self._backend_shm_prefix}"
            command.append(f"--backend-config=python,{option}")
        return [*command, *self.extra_args]

    def _launch(self, command: list[str], env: dict[str, str]) -> None:
        try:
            log = open(self.log_path, "wb")  # noqa: SIM115 - closed below, the child has it
        except OSError as error:
            why = f"cannot write the server log {self.log_path}: {error}"
            raise ServerStartError(why) from None
        with log:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self._watchdog = _start_watchdog(self._process.pid, self._workdir, self._backend_shm_prefix)
        _running.add(self)
        # Ready: the HTTP port answers ready, and this server, still alive, listens on
        # each of its ports (an answer can come from another server on a port it could
        # not take; tritonserver logs "Started ..." for a service before it binds).
        ports = {self.http_port}
        if not _switched_off(self.extra_args, "--allow-grpc"):
            ports.add(self.grpc_port)
        if not _switched_off(self.extra_args, "--allow-metrics"):
            ports.add(self.metrics_port)
        can_check = Path("/proc/net/tcp").exists()
        # (a server told to run on when a model fails, and never to be ready then)
        runs_on_failure = _switched_off(self.extra_args, "--exit-on-error") and not (
            _switched_off(self.extra_args, "--strict-readiness")
        )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            code = self._process.poll()
            if code is not None:
                raise ServerStartError(
                    f"tritonserver exited with code {code} while starting"
                    f"{_taken_ports(self.log_path)}; log {self.log_path}:\n{self.log_tail()}"
                )
            if _ready(self.host, self.http_port):
                listening = _listening_ports(self._process.pid) if can_check else None
                if (listening is None or ports <= listening) and self._process.poll() is None:
                    return
                if _PORT_CLASH in _tail(self.log_path, 200).lower():
                    # (Some versions log a taken metrics port and run on without it.)
                    raise ServerStartError(
                        f"a port of tritonserver was taken{_taken_ports(self.log_path)}; "
                        f"log {self.log_path}:\n{self.log_tail()}"
                    )
            elif runs_on_failure and _LOAD_FAILED in _tail(self.log_path, 200):
                # (without --exit-on-error=false it exits, and says so above)
                raise ServerStartError(
                    "a model failed to load, and the server is not ready while one has "
                    "(strict readiness): fix it, or add --strict-readiness=false to "
                    f"extra_args to run without it; log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.1)
        raise ServerStartError(
            f"tritonserver was not ready after {self.startup_timeout}s; "
            f"log {self.log_path}:\n{self.log_tail()}"
        )

    def _cleanup_process(self) -> None:
        process, self._process = self._process, None
        _running.discard(self)
        if process is None:
            self._stop_watchdog()
            return
        self._exited_with = process.poll()  # (None: it runs, and is stopped here)
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=_EXIT_TIMEOUT_SECONDS + 10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        # Python-backend stubs share the server's process group; take any stragglers.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        self._stop_watchdog()

    def _remove_workdir(self, keep_log: bool = False) -> None:
        workdir, self._workdir = self._workdir, None
        if workdir is None:
            return
        own_log = self._log_path is not None and self._log_path.is_relative_to(workdir)
        if keep_log and own_log:
            for item in workdir.iterdir():
                if item.is_symlink() or item.is_file():
                    if item != self._log_path:
                        item.unlink()
                else:
                    shutil.rmtree(item, ignore_errors=True)
            return
        if own_log:
            self._log_path = None
            self._log_removed = True
        shutil.rmtree(workdir, ignore_errors=True)

    def after_fork_in_child(self) -> None:
        """A forked child does not own the server: there, :meth:`stop`, the end of a
        ``with`` block and the child's exit leave it running for the parent."""
        watchdog = self._watchdog
        if watchdog is not None and watchdog.stdin is not None:
            # This process's end of the pipe: the watchdog still sees the parent's exit.
            watchdog.stdin.close()
        self._process = self._watchdog = self._workdir = None
        _running.discard(self)

    def stop(self, *, keep_log: bool = False) -> None:
        """Stop the server (SIGTERM, then SIGKILL after the exit timeout) and clean up.
        In a process forked from the one that started it, this does nothing.

        ``keep_log``: leave the server's log at :attr:`log_path` (a temporary one is
        otherwise removed with the rest of the server's temporary folder)."""
        self._cleanup_process()
        self._remove_workdir(keep_log=keep_log)
        self._fresh_ports = self._given_ports is None

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would; its ports are kept for the
        next start (nothing holds them meanwhile).

        The shared-memory files its Python backend leaves are removed.
        """
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._exited_with = self._process.wait()
            self._process = None
            _running.discard(self)
            self._stop_watchdog()

    def _stop_watchdog(self) -> None:
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            # Closing its stdin makes it kill the (already stopped) server group and exit.
            if watchdog.stdin is not None:
                with contextlib.suppress(BrokenPipeError):  # (it died: nothing to tell)
                    watchdog.stdin.write(_STOPPED)
                    watchdog.stdin.flush()
                with contextlib.suppress(BrokenPipeError):
                    watchdog.stdin.close()
            watchdog.wait()

    def restart(self) -> LocalServer:
        """Stop the server if it runs and start it again on the same ports."""
        self._cleanup_process()
        self._remove_workdir()
        return self.start()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        on_fork(self)  # (a copy started, then forked, must not be the child's to stop)

    def __getstate__(self) -> dict[str, Any]:
        if self._process is not None:
            # A copy would be a second owner of the one process (two could stop it).
            raise TypeError(
                "a started LocalServer cannot be pickled or copied: it owns its server "
                "process; pass its URLs (grpc_url, http_url) instead"
            )
        return self.__dict__.copy()

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
