"""LocalServer: a real tritonserver on free loopback ports, started and stopped cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import attrs
import pytest

import triton_sdk as ts
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
        "print(server.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    program = subprocess.Popen(
        [sys.executable, "-c", script, str(EXAMPLE_MODELS)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert program.stdout is not None
        server_pid = int(program.stdout.readline())
        assert _process_group_alive(server_pid)
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
        server.restart()
        assert server.running
        assert server.exit_code is None
        assert server.grpc_url == grpc_url
        with ts.Client(server.grpc_url) as client:
            assert client.is_ready()
    assert server.exit_code is None
