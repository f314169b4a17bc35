"""LocalServer: a real tritonserver on free loopback ports, started and stopped cleanly."""

from __future__ import annotations

import copy
import http.server
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Literal

import attrs
import numpy as np
import pytest

import triton_sdk as ts
import triton_sdk.local
from triton_sdk.local import LocalServer, ServerStartError, find_tritonserver

from .conftest import EXAMPLE_MODELS, FIXTURE_MODELS, wait_until


def _process_group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _backend_shm_files(server_pid: int) -> list[str]:
    """The /dev/shm files of the Python backend of the server ``server_pid``."""
    arguments = Path(f"/proc/{server_pid}/cmdline").read_bytes().decode().split("\0")
    option = "--backend-config=python,shm-region-prefix-name="
    (prefix,) = [argument.removeprefix(option) for argument in arguments if option in argument]
    assert prefix.startswith("triton_sdk_python_backend_")
    return sorted(path.name for path in Path("/dev/shm").glob(f"{prefix}*"))


def test_two_servers_side_by_side_then_stopped(tmp_path: Path) -> None:
    first = LocalServer(EXAMPLE_MODELS, log_path=tmp_path / "first.log")
    second = LocalServer(str(EXAMPLE_MODELS))
    with first, second:
        ports = {first.http_port, first.grpc_port, first.metrics_port}
        ports |= {second.http_port, second.grpc_port, second.metrics_port}
        assert len(ports) == 6
        assert first.grpc_url == f"grpc://127.0.0.1:{first.grpc_port}"
        assert first.http_url == f"http://127.0.0.1:{first.http_port}"
        assert first.metrics_url == f"http://127.0.0.1:{first.metrics_port}/metrics"
        for server in (first, second):
            with ts.Client(server.grpc_url) as client:
                assert client.model("add_sub").infer_sample(
                    INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1]
                )["OUTPUT0"].tolist() == [2, 3, 4, 5]
        pids = [first.pid, second.pid]
        assert all(pids)
        assert (tmp_path / "first.log").read_text().count("Started GRPCInferenceService") == 1
    for pid in pids:
        assert pid is not None
        assert not _process_group_alive(pid)
    assert first.pid is None
    # A log the caller asked for outlives the server.
    assert (tmp_path / "first.log").exists()


def test_broken_model_fails_with_the_log_tail(tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    (repository / "broken" / "1").mkdir(parents=True)
    (repository / "broken" / "config.pbtxt").write_text('backend: "python"\nmax_batch_size: [\n')
    (repository / "broken" / "1" / "model.py").write_text("")
    server = LocalServer(repository, startup_timeout=60)
    with pytest.raises(ServerStartError, match="broken") as caught:
        server.start()
    assert "tritonserver" in str(caught.value)
    assert server.pid is None


def test_model_that_cannot_load_fails_with_its_error(tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    (repository / "crashes" / "1").mkdir(parents=True)
    (repository / "crashes" / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    )
    (repository / "crashes" / "1" / "model.py").write_text(
        "class TritonPythonModel:\n"
        "    def initialize(self, args):\n"
        "        raise RuntimeError('weights are missing')\n"
    )
    with pytest.raises(ServerStartError, match="weights are missing"):
        LocalServer(repository, startup_timeout=60).start()
    # Told to run on, Triton is never ready: start() waited all of startup_timeout.
    server = LocalServer(repository, startup_timeout=60, extra_args=["--exit-on-error=false"])
    started = time.monotonic()
    with pytest.raises(ServerStartError, match="add --strict-readiness=false") as caught:
        server.start()
    assert time.monotonic() - started < 30
    assert "weights are missing" in str(caught.value)
    assert server.pid is None
    with LocalServer(
        repository, extra_args=["--exit-on-error=false", "--strict-readiness=false"]
    ) as running:
        assert running.client().models()[0].state == "UNAVAILABLE"


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"ports": (70000, 1, 2)}, "ports is a tuple"),
        ({"ports": (8000, 0, 8002)}, "ports is a tuple"),
        ({"ports": "800"}, "ports is a tuple"),
        ({"ports": b"\x01\x02\x03"}, "ports is a tuple"),
        ({"ports": (8000, 8000, 8002)}, "three different ports"),
        ({"startup_timeout": float("nan")}, "startup_timeout is a number"),
        ({"startup_timeout": 0}, "startup_timeout is a number"),
        ({"log_verbose": "x"}, "log_verbose is an int"),
        ({"log_verbose": -1}, "log_verbose is an int"),
    ],
)
def test_bad_arguments_are_refused_before_anything_starts(
    arguments: dict[str, Any], said: str
) -> None:
    # A port past 65535 wrapped around: start() waited on a port nothing listened on.
    with pytest.raises(ServerStartError, match=said):
        LocalServer(EXAMPLE_MODELS, **arguments)


def test_arguments_of_other_types_that_mean_the_same_are_taken() -> None:
    ports = [np.int64(8000), 8001, 8002]
    server = LocalServer(
        EXAMPLE_MODELS, ports=ports, startup_timeout=float("inf"), log_verbose=np.int64(1)
    )
    assert server._given_ports == (8000, 8001, 8002)
    server = LocalServer(EXAMPLE_MODELS, ports=np.array([8000, 8001, 8002]))
    assert server._given_ports == (8000, 8001, 8002)


def test_a_start_that_aborts_in_the_known_python_backend_crash_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real server, behind a wrapper whose first run dies as tritonserver sometimes does.
    real = find_tritonserver()
    runs = tmp_path / "runs"
    wrapper = tmp_path / "tritonserver"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"echo run >> {runs}\n"
        f'if [ "$(wc -l < {runs})" -eq 1 ]; then\n'
        '  echo "terminate called after throwing an instance of '
        "'boost::interprocess::lock_exception'\"\n"
        "  kill -ABRT $$\n"
        "fi\n"
        f'exec {real.binary} "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setattr(
        "triton_sdk.local.find_tritonserver", lambda: attrs.evolve(real, binary=wrapper)
    )
    with LocalServer(EXAMPLE_MODELS) as server, ts.Client(server.grpc_url) as client:
        assert client.is_ready()
    assert runs.read_text().count("run") == 2


def test_a_start_that_aborts_otherwise_is_not_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = tmp_path / "runs"
    wrapper = tmp_path / "tritonserver"
    wrapper.write_text(f"#!/bin/sh\necho run >> {runs}\necho 'Segmentation fault'\nkill -ABRT $$\n")
    wrapper.chmod(0o755)
    real = find_tritonserver()
    monkeypatch.setattr(
        "triton_sdk.local.find_tritonserver", lambda: attrs.evolve(real, binary=wrapper)
    )
    with pytest.raises(ServerStartError, match="exited with code -6"):
        LocalServer(EXAMPLE_MODELS).start()
    assert runs.read_text().count("run") == 1


def test_missing_repository_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ServerStartError, match="not a directory"):
        LocalServer(tmp_path / "nowhere").start()


def test_tritonserver_path_must_name_a_binary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRITONSERVER_PATH", str(tmp_path / "no-binary"))
    with pytest.raises(ServerStartError, match="TRITONSERVER_PATH"):
        find_tritonserver()
    monkeypatch.delenv("TRITONSERVER_PATH")
    installation = find_tritonserver()
    assert installation.binary.name == "tritonserver"
    assert installation.python_stub is not None


def test_unstarted_server_has_no_addresses() -> None:
    server = LocalServer(FIXTURE_MODELS)
    with pytest.raises(ServerStartError, match="not been started"):
        _ = server.grpc_url


def test_demo_runs_against_a_real_server() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "triton_sdk", "demo"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    output = completed.stdout
    assert "is ready at grpc://127.0.0.1:" in output
    assert "input   TEXT    BYTES     [1]" in output
    assert "output  OUTPUT  FP32      [768]" in output
    for label in ("gRPC", "HTTP", "gRPC asyncio", "HTTP asyncio"):
        assert f"[{label:<12}] text_embed" in output
        assert f"[{label:<12}] add_sub" in output
    assert output.count("-> OUTPUT0 [11. 22. 33. 44.]") == 4


def test_server_does_not_outlive_a_killed_program() -> None:
    script = (
        "import sys, time\n"
        "from triton_sdk.local import LocalServer\n"
        "server = LocalServer(sys.argv[1]).start()\n"
        "print(server.pid, server.log_path.parent, flush=True)\n"
        "time.sleep(600)\n"
    )
    program = subprocess.Popen(
        [sys.executable, "-c", script, str(EXAMPLE_MODELS)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert program.stdout is not None
        pid, folder = program.stdout.readline().split()
        server_pid, workdir = int(pid), Path(folder)
        assert _process_group_alive(server_pid)
        assert (workdir / "tritonserver.log").exists()
        backend_files = _backend_shm_files(server_pid)
        assert backend_files  # the Python backend's, for add_sub and text_embed
        program.kill()
        program.wait()
        deadline = time.monotonic() + 20
        while _process_group_alive(server_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _process_group_alive(server_pid)
        # The killed server could not remove them; the watchdog did.
        wait_until(
            lambda: not any((Path("/dev/shm") / name).exists() for name in backend_files),
            "the backend's files are removed",
            timeout=20,
        )
        # So did its temporary folder: it was left, log and links, in /tmp.
        wait_until(lambda: not workdir.exists(), "the server's folder is removed", timeout=20)
    finally:
        program.kill()
        program.wait()


def test_a_killed_server_leaves_no_shared_memory_files() -> None:
    server = LocalServer(EXAMPLE_MODELS).start()
    try:
        assert server.pid is not None
        backend_files = _backend_shm_files(server.pid)
        assert len(backend_files) >= 2
        server.kill()
        assert not any((Path("/dev/shm") / name).exists() for name in backend_files)
    finally:
        server.stop()
    # Its log went with it: "has not been started" said the wrong thing.
    with pytest.raises(ServerStartError, match="log was removed when it stopped"):
        server.log_tail()


def test_a_crashed_server_reports_its_exit_code_and_restarts_on_its_ports() -> None:
    with LocalServer(EXAMPLE_MODELS) as server:
        assert server.running
        assert server.exit_code is None
        grpc_url, pid = server.grpc_url, server.pid
        assert pid is not None
        os.kill(pid, signal.SIGSEGV)  # as a crash inside the server would end it
        deadline = time.monotonic() + 20
        while server.running and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.exit_code == -signal.SIGSEGV
        assert server.pid is None  # (it was the dead process's)
        server.restart()
        assert server.running
        assert server.exit_code is None
        assert server.grpc_url == grpc_url
        with ts.Client(server.grpc_url) as client:
            assert client.is_ready()
    assert server.exit_code is None


def _infers(server: LocalServer, protocol: Literal["grpc", "http"] = "grpc") -> bool:
    with server.client(protocol) as client:
        result = client.model("add_sub").infer(INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1])
        return bool(result["OUTPUT0"].tolist() == [2, 3, 4, 5])


@pytest.mark.parametrize("name", ["with space", "ü", "r$(touch${IFS}MARKER)"])
def test_python_models_run_from_a_path_the_backend_command_cannot_carry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # The Python backend starts its stubs with `bash -c "exec STUB MODEL_PATH ..."`.
    # The last name would run `touch TMP/pwned` there (a name cannot hold the "/").
    marker = tmp_path / "pwned"
    parent = Path(str(tmp_path / name).replace("MARKER", str(marker)))
    repository = parent / "repository"
    repository.mkdir(parents=True)
    shutil.copytree(EXAMPLE_MODELS / "add_sub", repository / "add_sub")
    temporary = parent / "tmp"  # TMPDIR, where the work folder (and the stub) would go
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    with LocalServer(repository, startup_timeout=60) as server:
        assert _infers(server)
        assert server.repository == repository.resolve()
    assert not marker.exists()


def _taking_port(monkeypatch: pytest.MonkeyPatch, index: int, port: int) -> list[list[int]]:
    """Make the first ports LocalServer picks include ``port`` at ``index``."""
    picked: list[list[int]] = []
    free_ports = triton_sdk.local._free_ports

    def first_taken(count: int, host: str = "127.0.0.1") -> list[int]:
        ports = free_ports(count, host)
        if not picked:
            ports[index] = port
        picked.append(ports)
        return ports

    monkeypatch.setattr("triton_sdk.local._free_ports", first_taken)
    return picked


@pytest.mark.parametrize("index", [0, 1, 2], ids=["http", "grpc", "metrics"])
def test_a_port_taken_meanwhile_is_replaced_whichever_it_is(
    monkeypatch: pytest.MonkeyPatch, index: int
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        picked = _taking_port(monkeypatch, index, port)
        with LocalServer(EXAMPLE_MODELS) as server:
            assert len(picked) == 2
            assert port not in (server.http_port, server.grpc_port, server.metrics_port)
            with urllib.request.urlopen(server.metrics_url, timeout=10) as answer:
                assert b"nv_inference_request_success" in answer.read()
            assert _infers(server, "http")
            assert _infers(server, "grpc")
            assert server.running


class _AlwaysReady(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_another_server_answering_ready_on_the_port_is_not_taken_for_this_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AlwaysReady)
    thread = threading.Thread(target=other.serve_forever, daemon=True)
    thread.start()
    try:
        picked = _taking_port(monkeypatch, 0, other.server_address[1])
        with LocalServer(EXAMPLE_MODELS) as server:
            assert len(picked) == 2
            assert server.http_port != other.server_address[1]
            assert server.running
            assert _infers(server, "http")
    finally:
        other.shutdown()
        other.server_close()


def test_a_python_env_that_is_no_environment_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "no-env"
    with pytest.raises(ServerStartError, match=r"no-env.*no bin/python"):
        LocalServer(EXAMPLE_MODELS, python_env=missing).start()
    monkeypatch.setenv("TRITON_SDK_PYTHON_ENV", str(tmp_path))
    with pytest.raises(ServerStartError, match="TRITON_SDK_PYTHON_ENV"):
        LocalServer(EXAMPLE_MODELS).start()


def test_starting_a_crashed_server_starts_it_again() -> None:
    server = LocalServer(EXAMPLE_MODELS).start()
    try:
        pid = server.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not server.running, "the server is dead")
        with server as again:
            assert again.running
            assert again.pid != pid
            assert not _process_group_alive(pid)
            assert _infers(again)
    finally:
        server.stop()


def test_an_interrupted_start_leaves_no_server_and_no_folder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = LocalServer(EXAMPLE_MODELS)
    seen: dict[str, Any] = {}

    def interrupted(host: str, port: int) -> bool:
        seen.update(pid=server.pid, workdir=server._workdir)
        raise KeyboardInterrupt

    monkeypatch.setattr("triton_sdk.local._ready", interrupted)
    with pytest.raises(KeyboardInterrupt):
        server.start()
    assert seen["pid"] is not None
    assert server.pid is None
    assert not _process_group_alive(seen["pid"])
    assert not seen["workdir"].exists()


def test_a_log_path_that_cannot_be_written_is_a_start_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temporary = tmp_path / "tmp"  # where the work folder goes
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    server = LocalServer(EXAMPLE_MODELS, log_path=tmp_path / "nodir" / "x.log")
    with pytest.raises(ServerStartError, match=r"cannot write the server log .*nodir"):
        server.start()
    assert server.pid is None
    assert not any(temporary.iterdir())


def test_extra_args_must_be_a_sequence_and_keep_http() -> None:
    with pytest.raises(TypeError, match="not a str"):
        LocalServer(EXAMPLE_MODELS, extra_args="--log-info=false")
    for args in (["--allow-http=false"], ["--allow-http", "0"], ["--allow-h=false"]):
        with pytest.raises(ServerStartError, match="--allow-http=false is not supported"):
            LocalServer(EXAMPLE_MODELS, extra_args=args)
    # Its readiness probe got 403 until startup_timeout, then "not ready".
    for args in (
        ["--http-restricted-api=health:x-key=v"],
        ["--http-restricted-api", "metadata, Health:x-key=v"],
        ["--http-restricted-a=health:x-key=v"],  # (tritonserver takes it, abbreviated)
        ["--http-restricted=health:x-key=v"],
    ):
        with pytest.raises(ServerStartError, match="may not restrict health"):
            LocalServer(EXAMPLE_MODELS, extra_args=args)
    LocalServer(EXAMPLE_MODELS, extra_args=["--http-restricted-api=inference:health=v"])


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--http-port=1"], "--http-port"),
        (["--grpc-port", "1"], "--grpc-port"),
        (["--http-po=1"], "--http-port"),  # (tritonserver reads abbreviations)
        (["--metrics-addr=0.0.0.0"], "--metrics-address"),
        (["--model-control=poll"], "--model-control-mode"),  # (cut short before the last word)
    ],
)
def test_extra_args_may_not_set_where_the_server_listens(args: list[str], option: str) -> None:
    # tritonserver took the last value: the start waited out its whole timeout.
    with pytest.raises(ServerStartError, match=f"sets {option} itself"):
        LocalServer(EXAMPLE_MODELS, extra_args=args)
    # Options that add to the server's own are the user's to give.
    LocalServer(EXAMPLE_MODELS, extra_args=["--model-repository=/x", "--grpc-port-x=1"])


def test_a_model_control_mode_the_server_has_not_is_refused() -> None:
    with pytest.raises(ServerStartError, match="model_control is one of explicit, none, poll"):
        LocalServer(EXAMPLE_MODELS, model_control="bogus")  # type: ignore[arg-type]


def test_a_stopped_server_starts_again_on_fresh_ports_and_keeps_its_facts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    server = LocalServer(EXAMPLE_MODELS, log_path="relative.log")
    assert server.log_path == tmp_path / "relative.log"  # (it stayed relative)
    server.start()
    try:
        assert server.log_tail(0) == ""  # (it was the whole log)
        with pytest.raises(TypeError, match="cannot be pickled or copied"):
            copy.copy(server)  # (a second owner of the one process)
        http_port = server.http_port
        server.kill()
        assert server.exit_code == -signal.SIGKILL  # (it was None)
        server.stop()
        with socket.socket() as taken:  # another program takes the port meanwhile
            taken.bind(("127.0.0.1", http_port))
            taken.listen()
            server.start()  # (it kept the old ports, and failed)
            assert server.http_port != http_port
            assert _infers(server)
    finally:
        server.stop()
