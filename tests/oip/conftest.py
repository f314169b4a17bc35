"""Real MLServer and KServe servers for the Open Inference Protocol lane (``nox -s oip``).

Each runs from an environment of its own, named by TRITON_SDK_MLSERVER (the ``mlserver``
command) and TRITON_SDK_KSERVE_PYTHON (a Python with kserve); ``nox -s oip`` makes both.
Without them these tests are not collected (the other sessions do not install the servers).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from triton_sdk.local import _free_ports

from ..integration._blocking import Blocking, LoopThread

HERE = Path(__file__).parent
MLSERVER = os.environ.get("TRITON_SDK_MLSERVER")
KSERVE_PYTHON = os.environ.get("TRITON_SDK_KSERVE_PYTHON")

if not (MLSERVER and KSERVE_PYTHON):
    collect_ignore_glob = ["test_*.py"]


class OIPServer:
    """A server process on free loopback ports, ready when its HTTP health says so."""

    def __init__(self, name: str, command: list[str], http: int, grpc: int, **popen: Any) -> None:
        self.name = name
        self.http_url = f"http://127.0.0.1:{http}"
        self.grpc_url = f"grpc://127.0.0.1:{grpc}"
        self._command = command
        self._popen = popen
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> OIPServer:
        with open(self._popen.pop("log"), "wb") as log:
            # A session of its own: stopping it stops whatever workers it started.
            self._process = subprocess.Popen(
                self._command,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **self._popen,
            )
        try:
            self._wait_ready(time.monotonic() + 120)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wait_ready(self, deadline: float) -> None:
        assert self._process is not None
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self._process.returncode}")
            try:
                with urllib.request.urlopen(f"{self.http_url}/v2/health/ready", timeout=2):
                    return
            except (OSError, http.client.HTTPException):
                time.sleep(0.3)
        raise RuntimeError(f"{self.name} was not ready in 120 s")

    def __exit__(self, *exc: object) -> None:
        process = self._process
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="session")
def mlserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OIPServer]:
    repository = tmp_path_factory.mktemp("mlserver")
    shutil.copytree(HERE / "mlserver_models", repository, dirs_exist_ok=True)
    http, grpc, metrics = _free_ports(3)
    settings = {
        "host": "127.0.0.1",
        "http_port": http,
        "grpc_port": grpc,
        "metrics_port": metrics,
        "parallel_workers": 0,
        "debug": False,
    }
    (repository / "settings.json").write_text(json.dumps(settings))
    env = {**os.environ, "PYTHONPATH": str(repository)}
    command = [str(MLSERVER), "start", str(repository)]
    log = repository / "server.log"
    with OIPServer("mlserver", command, http, grpc, cwd=repository, env=env, log=log) as server:
        yield server


@pytest.fixture(scope="session")
def kserve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OIPServer]:
    http, grpc = _free_ports(2)
    script = HERE / "kserve_server.py"
    command = [str(KSERVE_PYTHON), str(script), "--http_port", str(http), "--grpc_port", str(grpc)]
    log = tmp_path_factory.mktemp("kserve") / "server.log"
    with OIPServer("kserve", command, http, grpc, log=log) as server:
        yield server


@pytest.fixture(params=["mlserver", "kserve"])
def server(request: pytest.FixtureRequest) -> OIPServer:
    return request.getfixturevalue(str(request.param))  # type: ignore[no-any-return]


@pytest.fixture(params=["grpc", "http"])
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_client(server: OIPServer, protocol: str, mode: str) -> Iterator[Any]:
    """Clients of this test's server, protocol and mode: make_client(**options)."""
    import triton_sdk as ts

    loop = LoopThread()
    opened: list[Any] = []

    def make(**options: Any) -> Any:
        url = server.grpc_url if protocol == "grpc" else server.http_url
        client: Any = ts.Client(url, **options)
        if mode == "async":
            client = Blocking(ts.AsyncClient(url, **options), loop)
        opened.append(client)
        return client

    yield make
    for client in opened:
        if isinstance(client, Blocking):
            loop.run(client.target.aclose())
        else:
            client.close()
    loop.close()


@pytest.fixture
def client(make_client: Any) -> Any:
    return make_client()
