"""Where the server's Python models run: the decision, and a failure to make their
numpy-1 environment. (Making it for real is what the numpy 2 test session does.)"""

from __future__ import annotations

import copy
import importlib.util
import subprocess
from pathlib import Path
from typing import Any

import pytest

from triton_sdk import _fork, local
from triton_sdk.local import LocalServer, ServerStartError, _managed_option, models_environment


def test_a_given_environment_is_used(tmp_path: Path) -> None:
    assert models_environment(tmp_path) == tmp_path


def test_numpy_1_here_means_the_running_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("importlib.metadata.version", lambda name: "1.26.4")
    assert models_environment(None) is None


def test_numpy_2_here_means_an_environment_of_their_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr("importlib.metadata.version", lambda name: "2.1.0")
    made = tmp_path / "made"
    monkeypatch.setattr(local, "numpy1_environment", lambda: made)
    assert models_environment(None) == made


def test_a_failure_to_make_it_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TRITON_SDK_CACHE", str(tmp_path))

    def fail(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, 1, "", "no registry reachable")

    monkeypatch.setattr(subprocess, "run", fail)
    with pytest.raises(ServerStartError) as info:
        local.numpy1_environment()
    assert "need numpy 1" in str(info.value)
    assert "no registry reachable" in str(info.value)
    assert "TRITON_SDK_PYTHON_ENV" in str(info.value)
    assert not (tmp_path / "models-py3.11-numpy1" / ".ready").exists()


def test_without_the_wheel_here_the_private_copy_is_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TRITONSERVER_PATH", raising=False)
    private = tmp_path / "server"
    binary = private / "pytriton" / "tritonserver" / "bin" / "tritonserver"
    binary.parent.mkdir(parents=True)
    binary.write_text("")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "pytriton" else real_find_spec(name, *args),
    )
    monkeypatch.setattr(local, "install_server", lambda: private)
    assert local.find_tritonserver().binary == binary


def test_a_failure_to_install_the_server_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TRITON_SDK_CACHE", str(tmp_path))

    def fail(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert "--no-deps" in command  # its numpy<2 pin must not reach this environment
        return subprocess.CompletedProcess(command, 1, "", "no registry reachable")

    monkeypatch.setattr(subprocess, "run", fail)
    with pytest.raises(ServerStartError, match="TRITONSERVER_PATH") as info:
        local.install_server()
    assert "no registry reachable" in str(info.value)


@pytest.mark.parametrize(
    ("arg", "managed"),
    [
        ("--http-port=1", "--http-port"),
        ("--http-po=1", "--http-port"),  # (tritonserver's getopt_long reads abbreviations)
        ("--grpc-a", "--grpc-address"),
        ("--model-control-mode=none", "--model-control-mode"),
        ("--http-thread-count=4", None),
        ("--grpc-port-x=1", None),
        ("--metrics-interval-ms=10", None),
        ("--model-repository=/other", None),  # (it adds a repository)
    ],
)
def test_the_options_a_local_server_sets_itself(arg: str, managed: str | None) -> None:
    assert _managed_option(arg) == managed


def test_a_copy_of_an_unstarted_server_is_its_own_owner_in_forks(tmp_path: Path) -> None:
    # A copy was not registered: started, then forked, the child's stop() killed it.
    server = LocalServer(tmp_path)
    copied = copy.copy(server)
    assert copied is not server
    assert copied in _fork._AWARE
