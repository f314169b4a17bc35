"""``triton-sdk stubgen`` against the real server: write, use on all four transports,
check, and what it says when the file or the server changed."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import triton_sdk as ts
from triton_sdk._cli import main
from triton_sdk.local import LocalServer

from .._reader import StreamReader
from ._blocking import Blocking, LoopThread
from .conftest import server_url

LONG = 60
DELAY_MS = 100  # a stream of LONG responses takes 6 s


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
    assert "AddSub, Repeat, TextEmbed" in capsys.readouterr().out
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


def test_check_of_a_model_the_server_lacks_is_a_change(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "models.py"
    assert main(["stubgen", url, "-m", "add_sub", "-o", str(path)]) == 0
    command = ["stubgen", url, "-m", "add_sub", "-m", "no_such_model", "-o", str(path)]
    assert main([*command, "--check"]) == 1
    assert "cannot match the models of" in capsys.readouterr().out
    assert main(command) == 2  # writing it is an error


def test_the_module_does_not_depend_on_the_order_of_the_models(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "models.py"
    assert main(["stubgen", url, "-m", "text_embed", "-m", "add_sub", "-o", str(path)]) == 0
    assert "AddSub, TextEmbed" in capsys.readouterr().out
    written = path.read_text()
    assert main(["stubgen", url, "-m", "add_sub", "-m", "text_embed", "-o", str(path)]) == 0
    assert path.read_text() == written


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


def repeat_module(server: LocalServer, protocol: str, tmp_path: Path) -> tuple[str, ModuleType]:
    """The server's URL for ``protocol``, and the module stubgen writes for ``repeat``."""
    url = server_url(server, protocol)
    path = tmp_path / "models.py"
    assert main(["stubgen", url, "-m", "repeat", "-o", str(path)]) == 0
    return url, load(path)


def test_a_generated_stream_is_the_models_response_stream(
    server: LocalServer, protocol: str, tmp_path: Path
) -> None:
    url, models = repeat_module(server, protocol, tmp_path)
    with ts.Client(url) as client:
        repeat = models.Repeat(client.model("repeat"))
        with pytest.raises(ts.InvalidInputError, match="'IN'"):
            repeat.stream(IN=["x"])  # at the call, as Model.stream
        with repeat.stream(IN=list(range(LONG)), DELAY_MS=DELAY_MS) as stream:
            assert isinstance(stream, ts.ResponseStream)
            first = next(stream)
            assert type(first) is models.RepeatResult
            assert first.OUT.tolist() == [0]
        assert list(stream) == []  # left: cancelled
        # Closed from another thread while that one waits for the next response.
        stream = repeat.stream(IN=list(range(LONG)), DELAY_MS=DELAY_MS)
        reader = StreamReader(stream)
        reader.wait_until_waiting()
        stream.close()
        reader.join(3)
        assert reader.outcome == ["ended"]
        assert 0 < len(reader.seen) < LONG // 2
        assert all(type(seen) is models.RepeatResult for seen in reader.seen)
        assert [response.OUT.tolist() for response in repeat.stream(IN=[5])] == [[5]]


def test_a_generated_async_stream_is_the_models_async_response_stream(
    server: LocalServer, protocol: str, tmp_path: Path
) -> None:
    url, models = repeat_module(server, protocol, tmp_path)

    async def run() -> None:
        async with ts.AsyncClient(url) as client:
            repeat = models.AsyncRepeat(await client.model("repeat"))
            with pytest.raises(ts.InvalidInputError, match="'IN'"):
                repeat.stream(IN=["x"])  # at the call, before any iteration
            async with repeat.stream(IN=list(range(LONG)), DELAY_MS=DELAY_MS) as stream:
                assert isinstance(stream, ts.AsyncResponseStream)
                first = await anext(stream)
                assert type(first) is models.RepeatResult
                assert first.OUT.tolist() == [0]
            assert [response async for response in stream] == []
            # Closed from another task while that one awaits the next response.
            stream = repeat.stream(IN=list(range(LONG)), DELAY_MS=DELAY_MS)
            seen: list[Any] = []
            got_one = asyncio.Event()

            async def read() -> str:
                async for response in stream:
                    seen.append(response)
                    got_one.set()
                return "ended"

            reader = asyncio.create_task(read())
            await asyncio.wait_for(got_one.wait(), 10)
            await asyncio.sleep(0.05)  # the reader is back waiting in the stream
            await stream.aclose()
            assert await asyncio.wait_for(reader, 3) == "ended"
            assert 0 < len(seen) < LONG // 2
            assert all(type(response) is models.RepeatResult for response in seen)
            assert [r.OUT.tolist() async for r in repeat.stream(IN=[5])] == [[5]]

    asyncio.run(run())
