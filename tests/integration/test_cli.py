"""The ``triton-sdk`` command against the real server: each command, and the one line a
failure prints."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk._cli import EXAMPLE_MODELS as EXAMPLES
from triton_sdk._cli import UsageError, _output_files, main

from .conftest import unused_ports, wait_until

Capture = pytest.CaptureFixture[str]


def run(capsys: Capture, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_models_lists_the_repository(url: str, capsys: Capture) -> None:
    code, out, _ = run(capsys, "models", url)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["MODEL", "VERSION", "STATE", "REASON"]
    assert any(line.split()[:3] == ["add_sub", "1", "READY"] for line in lines[1:])


def test_describe_shows_inputs_and_outputs(url: str, capsys: Capture) -> None:
    code, out, _ = run(capsys, "describe", url, "text_embed")
    assert code == 0
    assert out.startswith("text_embed  (python, max_batch_size 8")
    assert "input   TEXT    BYTES     [1]" in out
    assert "output  OUTPUT  FP32      [768]" in out


def test_health_of_the_server_and_a_model(url: str, capsys: Capture) -> None:
    assert run(capsys, "health", url, "-m", "add_sub")[:2] == (
        0,
        f"server {url}: live yes, ready yes\nmodel add_sub: ready yes\n",
    )
    code, out, _ = run(capsys, "health", url, "-m", "no_such_model")
    assert code == 1
    assert "model no_such_model: ready no" in out


def test_infer_from_json_words_and_files(url: str, tmp_path: Path, capsys: Capture) -> None:
    code, out, _ = run(
        capsys, "infer", url, "add_sub", "-i", "INPUT0=[1, 2, 3, 4]", "-i", "INPUT1=[1,1,1,1]"
    )
    assert code == 0
    assert "OUTPUT0: float32 [4]" in out
    assert "[2. 3. 4. 5.]" in out
    np.save(tmp_path / "a.npy", np.arange(4, dtype=np.float32))
    (tmp_path / "b.json").write_text(json.dumps([10, 10, 10, 10]))
    outputs = tmp_path / "out"
    code, out, _ = run(
        capsys,
        "infer",
        url,
        "add_sub",
        "-i",
        f"INPUT0=@{tmp_path / 'a.npy'}",
        "-i",
        f"INPUT1=@{tmp_path / 'b.json'}",
        "--output-dir",
        str(outputs),
    )
    assert code == 0
    assert np.load(outputs / "OUTPUT0.npy").tolist() == [10, 11, 12, 13]
    assert np.load(outputs / "OUTPUT1.npy").tolist() == [-10, -9, -8, -7]
    code, out, _ = run(capsys, "infer", url, "text_embed", "--sample", "-i", "TEXT=hello")
    assert code == 0
    assert "OUTPUT: float32 [768]" in out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["infer", "{url}", "add_sub", "-i", "INPUT0=[1,2,3,4]"], "INPUT1"),
        (["infer", "{url}", "add_sub", "-i", "INPUT0"], "NAME=VALUE"),
        (["infer", "{url}", "add_sub", "-i", "INPUT0=@missing.npy"], "cannot read missing.npy"),
        (["describe", "{url}", "no_such_model"], "no_such_model"),
        (["models", "grpc://127.0.0.1:9"], "127.0.0.1:9"),
        # JSON cut short was sent as the string '["a", "b"' (or refused as a str for FP32).
        (["infer", "{url}", "text_embed", "--sample", "-i", 'TEXT=["a", "b"'], "not valid JSON"),
        (["infer", "{url}", "add_sub", "-i", "INPUT0=[1, 2, 3, 4"], "'INPUT0'"),
        (["infer", "{url}", "add_sub", "-i", "X=1", "-i", "X=2"], "input 'X' is given twice"),
        # A RecursionError traceback before.
        (["infer", "{url}", "add_sub", "-i", "INPUT0=" + "[" * 5000], "nested too deeply"),
        (["infer", "{url}", "add_sub", "-i", "INPUT0=@{tmp}/deep.json"], "nested too deeply"),
        # It pointed CLI users to Python calls (model.stream), not saying the CLI cannot.
        (["infer", "{url}", "repeat", "-i", "IN=[3]"], "this command reads one answer"),
        (["bench", "{url}", "repeat", "-i", "IN=[3]"], "this command reads one answer"),
        # The server takes the unloading of a name it does not have as done.
        (["unload", "{url}", "no_such_model"], "has no model 'no_such_model'"),
        # Files that cannot be written: tracebacks before.
        (["stubgen", "{url}", "-m", "add_sub", "-o", "/no/such/dir/m.py"], "cannot write"),
        (["stubgen", "{url}", "-m", "add_sub", "-o", "{tmp}"], "cannot write"),
        (
            [
                *("infer", "{url}", "add_sub", "-o", "{tmp}/file"),
                *("-i", "INPUT0=[1,2,3,4]", "-i", "INPUT1=[1,2,3,4]"),
            ],
            "cannot write the outputs",
        ),
    ],
)
def test_failures_are_one_line_and_exit_2(
    url: str, argv: list[str], expected: str, capsys: Capture, tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("")
    (tmp_path / "deep.json").write_text("[" * 5000 + "]" * 5000)
    code, out, err = run(capsys, *(part.format(url=url, tmp=tmp_path) for part in argv))
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"python -m triton_sdk {argv[0]}: ")
    assert expected in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["serve", "--http-port", "70000", "--grpc-port", "1", "--metrics-port", "2"], "port"),
        (["serve", "--http-port", "0", "--grpc-port", "1", "--metrics-port", "2"], "port"),
        (["bench", "{url}", "add_sub", "-c", "0"], "thread count"),
        (["bench", "{url}", "add_sub", "-c", "100000000000"], "thread count"),  # it hung
        (["bench", "{url}", "add_sub", "--seconds", "-1"], "seconds"),
        (["bench", "{url}", "add_sub", "--seconds", "nan"], "seconds"),
        (["bench", "{url}", "add_sub", "--seconds", "inf"], "seconds"),  # it ran forever
    ],
)
def test_numbers_out_of_range_are_refused_by_the_parser(
    url: str, argv: list[str], expected: str, capsys: Capture
) -> None:
    with pytest.raises(SystemExit) as info:
        main([part.format(url=url) for part in argv])
    assert info.value.code == 2
    assert f"invalid {expected} value" in capsys.readouterr().err


def test_a_bytes_output_written_with_o_goes_back_in_as_an_input(
    url: str, capsys: Capture, tmp_path: Path
) -> None:
    # It was written pickled, and -i NAME=@file.npy reads no pickles.
    code, _, _ = run(
        capsys, "infer", url, "upper", "-i", 'TEXT=["abc", "안녕"]', "-o", str(tmp_path)
    )
    assert code == 0
    code, out, err = run(capsys, "infer", url, "upper", "-i", f"TEXT=@{tmp_path / 'UPPER.npy'}")
    assert (code, err) == (0, "")
    assert "['ABC' '안녕']" in out


def test_a_bf16_output_written_with_o_goes_back_in_as_an_input(
    url: str, capsys: Capture, tmp_path: Path
) -> None:
    # numpy saves bfloat16 as raw 2-byte values (|V2), which were refused on the way back.
    code, _, _ = run(capsys, "infer", url, "all_dtypes", "-i", "IN_BF16=[[1.5, -2.25]]",
                     "-o", str(tmp_path))  # fmt: skip
    assert code == 0
    code, out, err = run(
        capsys, "infer", url, "all_dtypes", "-i", f"IN_BF16=@{tmp_path / 'OUT_BF16.npy'}"
    )
    assert (code, err) == (0, "")
    assert "OUT_BF16: bfloat16 [1, 2]" in out
    assert "[[1.5 -2.25]]" in out


def test_bytes_outputs_print_as_text(url: str, capsys: Capture) -> None:
    code, out, _ = run(capsys, "infer", url, "upper", "-i", 'TEXT=["héllo", "안녕하세요"]')
    assert code == 0
    assert "['HÉLLO' '안녕하세요']" in out  # not b'H\\xc3\\x89LLO' ...


def test_outputs_named_like_paths_are_written_in_the_output_directory() -> None:
    # ONNX names its outputs like paths: `-o DIR` wrote /model/Add_output_0.npy (or
    # failed), and ../escaped.npy beside DIR.
    outputs = {"/model/Add_output_0": 1, "../escaped": 2, "plain": 3}
    assert _output_files(outputs) == {
        "/model/Add_output_0": "_model_Add_output_0.npy",
        "../escaped": ".._escaped.npy",
        "plain": "plain.npy",
    }
    with pytest.raises(UsageError, match=r"'a/b' and 'a_b' would both be written to a_b\.npy"):
        _output_files({"a/b": 1, "a_b": 2})


def test_text_the_terminal_cannot_encode_prints_escaped(url: str) -> None:
    # A UnicodeEncodeError traceback (exit 1) before, after the server had answered.
    finished = subprocess.run(
        [sys.executable, "-m", "triton_sdk", "infer", url, "upper", "-i", 'TEXT=["h\u00e9"]'],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONIOENCODING": "ascii"},
    )
    assert finished.returncode == 0, finished.stderr
    assert "['H\\xc9']" in finished.stdout


def test_main_in_a_program_of_its_own_leaves_its_stdout_as_it_was(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Escaping is for the command's own output: the program's stdout keeps its errors."""
    data = io.BytesIO()
    stdout = io.TextIOWrapper(data, encoding="ascii", errors="strict", write_through=True)
    monkeypatch.setattr(sys, "stdout", stdout)
    assert main(["infer", url, "upper", "-i", 'TEXT=["h\u00e9"]']) == 0
    assert "['H\\xc9']" in data.getvalue().decode()
    assert stdout.errors == "strict"
    with pytest.raises(UnicodeEncodeError):
        print("\u00e9", file=stdout)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_an_output_that_cannot_be_written_is_one_line_and_exit_2(url: str) -> None:
    with open("/dev/full", "w") as full:
        finished = subprocess.run(
            [sys.executable, "-m", "triton_sdk", "models", url],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert finished.returncode == 2
    assert finished.stderr.startswith("python -m triton_sdk models: cannot write the output: ")
    assert len(finished.stderr.strip().splitlines()) == 1, finished.stderr


def test_a_reader_that_leaves_early_ends_the_command_quietly(url: str) -> None:
    # `triton-sdk models URL | head -1`: a BrokenPipeError traceback before.
    read, write = os.pipe()
    os.close(read)  # nobody reads: the first write fails with EPIPE
    for buffered in (True, False):
        # Buffered, the few lines are written at the end (at exit, before the fix).
        env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
        if not buffered:
            env["PYTHONUNBUFFERED"] = "1"
        try:
            finished = subprocess.run(
                [sys.executable, "-m", "triton_sdk", "models", url],
                stdout=write,
                stderr=subprocess.PIPE,
                text=True,
                timeout=60,
                check=False,
                env=env,
            )
        finally:
            if not buffered:
                os.close(write)
        assert finished.stderr == "", buffered
        assert finished.returncode == 141, buffered  # as a process ended by SIGPIPE


def run_with_stderr_closed(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv 2>&-``: the command starts without a stderr (its sys.stderr is None)."""
    return subprocess.run(
        ["/bin/sh", "-c", '"$@" 2>&-', "sh", *argv],
        stdout=subprocess.PIPE,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("stderr", ["closed", "a pipe nobody reads"])
def test_a_failure_with_nowhere_to_report_still_exits_2(stderr: str) -> None:
    # `triton-sdk models URL 2>&-`: the error line went to stdout, among the output; with
    # stderr's reader gone, a BrokenPipeError traceback ended it with 1.
    (port,) = unused_ports(1)
    argv = [sys.executable, "-m", "triton_sdk", "models", f"http://127.0.0.1:{port}"]
    if stderr == "closed":
        finished = run_with_stderr_closed(argv)
    else:
        read, write = os.pipe()
        os.close(read)
        try:
            finished = subprocess.run(
                argv, stdout=subprocess.PIPE, stderr=write, text=True, timeout=60, check=False
            )
        finally:
            os.close(write)
    assert finished.stdout == ""
    assert finished.returncode == 2


def test_load_and_unload(url: str, capsys: Capture) -> None:
    try:
        assert run(capsys, "unload", url, "zeros")[:2] == (0, "unloading zeros\n")
        deadline = time.monotonic() + 30
        while run(capsys, "health", url, "-m", "zeros")[0] == 0:
            assert time.monotonic() < deadline, "zeros was not unloaded"
            time.sleep(0.1)
    finally:
        assert run(capsys, "load", url, "zeros")[:2] == (0, "loaded zeros\n")
    assert run(capsys, "health", url, "-m", "zeros")[0] == 0


BROKEN_MODEL = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("boom")
"""
WORKING_MODEL = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]
            )
            for r in requests
        ]
"""


def test_a_model_that_fails_to_load_is_one_line(
    url: str, protocol: str, repository: Path, capsys: Capture
) -> None:
    # The server's reason carries the model's traceback ("At:\n  .../model.py(3)..."):
    # it made the error many lines, and broke the rows of the models table.
    name = f"broken_{protocol}"
    folder = repository / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
    )
    (folder / "1" / "model.py").write_text(BROKEN_MODEL)
    try:
        code, out, err = run(capsys, "load", url, name)
        assert code == 2
        assert len(err.strip().splitlines()) == 1, err
        assert "boom" in err
        code, out, err = run(capsys, "models", url)
        assert code == 0
        (row,) = [line for line in out.splitlines() if line.startswith(f"{name} ")]
        assert "UNAVAILABLE" in row
        assert "boom" in row
    finally:
        # A model that failed to load keeps the session server from being ready until a
        # load of it succeeds (an unload alone does not): load it working, then unload it.
        (folder / "1" / "model.py").write_text(WORKING_MODEL)
        assert run(capsys, "load", url, name)[0] == 0
        assert run(capsys, "unload", url, name)[0] == 0
        shutil.rmtree(folder)
    deadline = time.monotonic() + 30
    while run(capsys, "health", url)[0] != 0:
        assert time.monotonic() < deadline, "the server is not ready again"
        time.sleep(0.1)


def test_unload_takes_a_model_loaded_from_files(url: str, protocol: str, capsys: Capture) -> None:
    # Such a model is served but is not in the repository index, which unload read alone:
    # "the repository ... has no model", and it stayed loaded.
    name = f"from_files_{protocol}"
    config = {
        "name": name,
        "backend": "python",
        "max_batch_size": 0,
        "input": [{"name": "X", "data_type": "TYPE_INT32", "dims": [1]}],
        "output": [{"name": "Y", "data_type": "TYPE_INT32", "dims": [1]}],
    }
    with ts.Client(url) as client:
        client.load_model(name, config, files={"file:1/model.py": WORKING_MODEL.encode()})
        assert name not in {status.name for status in client.models()}
        try:
            assert run(capsys, "unload", url, name)[:2] == (0, f"unloading {name}\n")
            wait_until(lambda: not client.is_model_ready(name), f"{name} is unloaded")
        finally:
            client.unload_model(name)
    assert run(capsys, "unload", url, "no_such_model")[0] == 2


def test_bench_reports_throughput_and_latency(url: str, capsys: Capture) -> None:
    code, out, err = run(
        capsys,
        "bench",
        url,
        "add_sub",
        "-i",
        "INPUT0=[1,2,3,4]",
        "-i",
        "INPUT1=[1,2,3,4]",
        "--seconds",
        "0.5",
        "-c",
        "2",
    )
    assert code == 0
    assert "from 2 threads" in out
    assert "calls/s, latency p50" in out
    assert err == ""  # no progress bar when stderr is not a terminal


def test_bench_runs_with_stderr_closed(url: str) -> None:
    # `triton-sdk bench ... 2>&-`: asking whether stderr (None) is a terminal failed.
    argv = [sys.executable, "-m", "triton_sdk", "bench", url, "add_sub", "--seconds", "0.2"]
    argv += ["-i", "INPUT0=[1,2,3,4]", "-i", "INPUT1=[1,2,3,4]"]
    finished = run_with_stderr_closed(argv)
    assert finished.returncode == 0
    assert "calls/s, latency p50" in finished.stdout


def test_version(capsys: Capture) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("python -m triton_sdk 0.")


def test_serve_on_chosen_ports_until_sigterm(tmp_path: Path) -> None:
    http, grpc, metrics = unused_ports(3)
    command = [sys.executable, "-m", "triton_sdk", "serve", str(EXAMPLES)]
    command += ["--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(3)]
        assert lines[1].split() == ["gRPC", f"grpc://127.0.0.1:{grpc}"]
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=5) as reply:
            assert reply.status == 200
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 128 + signal.SIGTERM


def test_serve_stopped_by_ctrl_c_exits_130(tmp_path: Path) -> None:
    # It printed "Stopping." and exited 0, unlike every other command (and SIGTERM: 143).
    command = [sys.executable, "-m", "triton_sdk", "serve", str(EXAMPLES)]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
        # A shell without job control starts background jobs with SIGINT ignored (CI
        # does), and a Python started so never sees Ctrl+C: give it the default back.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert process.stdout is not None
        while "Press Ctrl+C" not in process.stdout.readline():
            assert process.poll() is None
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 130
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
    assert process.stderr is not None
    assert process.stderr.read().strip().endswith("serve: interrupted")


def test_serve_refuses_one_port_for_two_services(capsys: Capture) -> None:
    assert main(["serve", str(EXAMPLES), "--http-port", "18100", "--grpc-port", "18100",
                 "--metrics-port", "18102"]) == 2  # fmt: skip
    assert "must be three ports" in capsys.readouterr().err


def test_serve_on_a_taken_port_names_the_log_without_its_tail(capsys: Capture) -> None:
    # The log's last lines (the server's model and option tables) made one line of 4 KB.
    http, grpc, metrics = unused_ports(3)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", http))
        taken.listen()
        code = main(["serve", str(EXAMPLES), "--http-port", str(http), "--grpc-port",
                     str(grpc), "--metrics-port", str(metrics)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert "already in use" in err
    log = Path(err.rstrip().rsplit("; log ", 1)[1])  # the line ends with the log's path
    assert log.name == "tritonserver.log"
    assert len(err.splitlines()) == 1
    if log.is_file():  # (kept for the user to read)
        shutil.rmtree(log.parent)


def children_named(parent: int, name: str) -> list[int]:
    """The processes whose parent is ``parent`` and whose command line holds ``name``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and name.encode() in command:
            found.append(int(entry.name))
    return found


def test_serve_keeps_the_log_it_names_when_the_server_stops_on_its_own() -> None:
    # It printed the log's path, then removed the log with the rest of its folder.
    command = [sys.executable, "-m", "triton_sdk", "serve", str(EXAMPLES)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(6)]
        assert lines[4].split()[0] == "log"
        (server,) = children_named(process.pid, "tritonserver")
        os.kill(server, signal.SIGSEGV)
        rest, _ = process.communicate(timeout=60)
        assert process.returncode == 1
        log = Path(lines[4].split()[1])
        assert f"The server stopped on its own; log {log}:" in rest
        assert log.is_file()
        shutil.rmtree(log.parent)
    finally:
        process.kill()
        process.wait()


def test_install_server_says_where_the_server_and_the_models_run(capsys: Capture) -> None:
    code, out, _ = run(capsys, "install-server")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("tritonserver: ")
    assert lines[0].endswith("/bin/tritonserver")
    assert lines[1].startswith("Python-backend models run in: ")
