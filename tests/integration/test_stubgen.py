"""``triton-sdk stubgen`` against the real server: write, use on all four transports,
check, and what it says when the file or the server changed."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from triton_sdk._cli import main

from ._blocking import Blocking, LoopThread


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"stubs_{abs(hash(path))}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_stubgen_writes_a_module_that_runs_the_models(
    url: str,
    client: Any,
    loop_thread: LoopThread,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "models.py"
    assert (
        main(["stubgen", url, "-m", "add_sub", "-m", "text_embed", "-m", "repeat", "-o", str(path)])
        == 0
    )
    assert "AddSub, TextEmbed, Repeat" in capsys.readouterr().out
    models = load(path)
    if isinstance(client, Blocking):  # an AsyncClient: the Async twins
        add_sub = Blocking(models.AsyncAddSub(client.model("add_sub").target), loop_thread)
        embed = Blocking(models.AsyncTextEmbed(client.model("text_embed").target), loop_thread)
        repeat = Blocking(models.AsyncRepeat(client.model("repeat").target), loop_thread)
    else:
        add_sub = models.AddSub(client.model("add_sub"))
        embed = models.TextEmbed(client.model("text_embed"))
        repeat = models.Repeat(client.model("repeat"))
    result = add_sub.infer(INPUT0=[1, 2, 3, 4], INPUT1=[10, 20, 30, 40])
    assert result.OUTPUT0.tolist() == [11, 22, 33, 44]
    assert result["OUTPUT1"].tolist() == [-9, -18, -27, -36]
    assert embed.infer(TEXT=["hello", "world"]).OUTPUT.shape == (2, 768)
    assert embed.infer_sample(TEXT="hello").OUTPUT.shape == (768,)
    assert [int(response.OUT[0]) for response in repeat.stream(IN=[5, 6])] == [5, 6]


def test_check_says_whether_the_module_still_matches(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "models.py"
    command = ["stubgen", url, "-m", "add_sub", "-o", str(path)]
    assert main([*command, "--check"]) == 1
    assert "does not exist" in capsys.readouterr().out
    assert main(command) == 0
    assert main([*command, "--check"]) == 0
    assert "matches" in capsys.readouterr().out
    path.write_text(path.read_text().replace("INPUT1 FP32 [4]", "INPUT1 FP32 [8]"))
    assert main([*command, "--check"]) == 1
    out = capsys.readouterr().out
    assert "is not what stubgen writes now" in out
    assert "INPUT1 FP32 [8]" in out


def test_a_server_that_cannot_be_reached_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["stubgen", "grpc://127.0.0.1:9", "-m", "add_sub", "-o", str(tmp_path / "m.py")])
    assert code == 2
    err = capsys.readouterr().err
    assert "stubgen: " in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "m.py").exists()


def test_without_models_every_ready_model_is_written(url: str, tmp_path: Path) -> None:
    path = tmp_path / "models.py"
    assert main(["stubgen", url, "-o", str(path)]) == 0
    models = load(path)
    assert {"AddSub", "TextEmbed", "Repeat"} <= set(models.__all__)
