"""The ``triton-sdk`` command (also ``python -m triton_sdk``).

Every command that talks to a server takes its URL first. Failures the user can act on (an
unreachable server, an unknown model, a bad input file) print one line on stderr and exit
2; ``health`` exits 1 when the server or model is not ready.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import io
import json
import os
import re
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from ._async_client import AsyncClient
from ._checks import NO_LIMIT_FROM
from ._client import Client, Model
from ._dtypes import BF16
from ._errors import ModelNotFoundError, ModelNotReadyError, TritonError, UnsupportedError
from ._shaping import InputValue
from ._spec import ModelSpec
from .local import _PORT_CLASH, ServerStartError

EXAMPLE_MODELS = Path(__file__).resolve().parent / "examples" / "models"
_NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


class UsageError(Exception):
    """A mistake in the command line or its files: one line, exit 2."""


def describe(spec: ModelSpec) -> str:
    """A few lines showing what a model takes and returns."""
    return spec.describe()


# Inputs from the command line


def parse_input(text: str) -> tuple[str, InputValue]:
    """``NAME=@file.npy``, ``NAME=@file.json``, or ``NAME=<JSON>`` (a bare word is a string)."""
    name, separator, value = text.partition("=")
    if not separator or not name:
        raise UsageError(f"--input takes NAME=VALUE, NAME=@file.npy or NAME=@file.json: {text!r}")
    if value.startswith("@"):
        return name, _read_file(name, Path(value[1:]))
    try:
        parsed: InputValue = json.loads(value)
    except RecursionError:
        raise UsageError(f"input {name!r}: its JSON is nested too deeply") from None
    except json.JSONDecodeError as error:
        if value.lstrip()[:1] in ("[", "{", '"'):
            raise UsageError(
                f"input {name!r}: {value!r} is not valid JSON ({error}); a string that "
                'starts with [, { or " is written as JSON: \'"[text"\''
            ) from None
        return name, value  # a bare word: one string
    return name, parsed


def _read_file(name: str, path: Path) -> InputValue:
    try:
        if path.suffix == ".npy":
            loaded: np.ndarray[Any, Any] = np.load(path, allow_pickle=False)
            if loaded.dtype.kind == "V" and loaded.dtype.itemsize == 2 and not loaded.dtype.names:
                # numpy saves bfloat16 (which it does not know) as raw 2-byte values
                loaded = loaded.view(BF16)
            return loaded
        if path.suffix == ".json":
            data: InputValue = json.loads(path.read_text(encoding="utf-8"))
            return data
    except (OSError, ValueError) as error:
        raise UsageError(f"input {name!r}: cannot read {path}: {error}") from error
    except RecursionError:
        raise UsageError(f"input {name!r}: the JSON of {path} is nested too deeply") from None
    raise UsageError(f"input {name!r}: {path} is neither .npy nor .json")


def _inputs(given: Sequence[str] | None) -> dict[str, InputValue]:
    inputs: dict[str, InputValue] = {}
    for text in given or ():
        name, value = parse_input(text)
        if name in inputs:
            raise UsageError(f"input {name!r} is given twice")
        inputs[name] = value
    return inputs


# Commands


def models(url: str) -> int:
    with Client(url) as client:
        rows = [
            (s.name, s.version or "-", s.state or "-", _one_line(s.reason)) for s in client.models()
        ]
    width = max([len(row[0]) for row in rows] + [5])
    print(f"{'MODEL':<{width}}  VERSION  STATE        REASON")
    for name, version, state, reason in rows:
        print(f"{name:<{width}}  {version:<7}  {state:<11}  {reason}".rstrip())
    return 0


def describe_command(url: str, model: str) -> int:
    with Client(url) as client:
        print(describe(client.model_spec(model)))
    return 0


def health(url: str, model: str | None) -> int:
    with Client(url) as client:
        live, ready = client.is_live(), client.is_ready()
        print(f"server {url}: live {'yes' if live else 'no'}, ready {'yes' if ready else 'no'}")
        model_ready = True
        if model is not None:
            model_ready = client.is_model_ready(model)
            print(f"model {model}: ready {'yes' if model_ready else 'no'}")
    return 0 if live and ready and model_ready else 1


def infer(
    url: str, model: str, given: Sequence[str] | None, sample: bool, output_dir: Path | None
) -> int:
    inputs = _inputs(given)
    with Client(url) as client:
        handle = _answering_once(client.model(model))
        result = handle.infer_sample(inputs) if sample else handle.infer(inputs)
        outputs = {name: result[name] for name in result}
    if output_dir is not None:
        files = _output_files(outputs)
        try:
            output_dir.mkdir(parents=True, exist_ok=True)
            for name, array in outputs.items():
                path = output_dir / files[name]
                saved = _without_objects(array)
                np.save(path, saved, allow_pickle=saved.dtype == object)
                print(f"{name}: {array.dtype} {list(array.shape)} -> {path}")
        except OSError as error:
            raise UsageError(f"cannot write the outputs to {output_dir}: {error}") from None
        return 0
    with np.printoptions(threshold=20, edgeitems=3):
        for name, array in outputs.items():
            print(f"{name}: {array.dtype} {list(array.shape)}")
            print(f"  {np.array2string(_shown(array), prefix='  ')}")
    return 0


def _answering_once(model: Model) -> Model:
    """``model``, unless it is decoupled: the commands send a request and read its one
    answer, which such a model does not give."""
    if model.spec.decoupled:
        raise UsageError(
            f"model {model.name!r} is decoupled (it may answer with any number of responses), "
            "and this command reads one answer: stream it from Python (model.stream(...))"
        )
    return model


def _without_objects(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A BYTES output as fixed-width bytes, which loads without pickle (and so goes back in
    as ``-i NAME=@file.npy``); one with an element that ends in NUL, which that dtype
    would drop, or whose longest element would pad the rest to far more than the text
    takes, stays an object array (pickled)."""
    if array.dtype != object:
        return array
    items = list(array.reshape(-1))  # (not .flat: numpy 2 refuses it past 32 axes)
    if not all(isinstance(item, bytes) and not item.endswith(b"\0") for item in items):
        return array
    padded = max((len(item) for item in items), default=0) * len(items)
    if padded > 2 * sum(len(item) for item in items) + (1 << 20):
        return array
    return array.astype(np.bytes_)


def _output_files(outputs: Mapping[str, object]) -> dict[str, str]:
    """The file of each output in the output directory: ``NAME.npy``, with any path
    separator in the name (the server's: ONNX names look like ``/model/Add_output_0``)
    written as ``_``, so that every file lands in the directory itself."""
    files: dict[str, str] = {}
    taken: dict[str, str] = {}
    for name in outputs:
        file = re.sub(r"[/\\\x00]", "_", name) + ".npy"
        if file in taken:
            raise UsageError(
                f"outputs {taken[file]!r} and {name!r} would both be written to {file}; "
                "leave out -o to print them"
            )
        files[name] = file
        taken[file] = name
    return files


def _shown(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """BYTES elements as the text they hold (bytes that are not UTF-8 escaped), so that
    '안녕' prints as itself and not as b'\\xec\\x95...'."""
    if array.dtype != object:
        return array
    shown = np.empty(array.shape, dtype=object)
    for index, item in np.ndenumerate(array):
        text = item.decode("utf-8", "backslashreplace") if isinstance(item, bytes) else item
        shown[index] = text
    return shown


def load(url: str, model: str) -> int:
    with Client(url) as client:
        client.load_model(model)
    print(f"loaded {model}")
    return 0


def unload(url: str, model: str) -> int:
    with Client(url) as client:
        # Triton takes the unloading of a name it does not have as done. A server without
        # a repository index (KServe) is left to say so itself.
        try:
            names: set[str] | None = {status.name for status in client.models()}
        except UnsupportedError:
            names = None
        # (a model loaded from files= is served, but not in the index)
        if names is not None and model not in names and not client.is_model_ready(model):
            raise UsageError(f"the repository of {url} has no model {model!r}")
        client.unload_model(model)
    print(f"unloading {model}")
    return 0


def bench(
    url: str, model: str, given: Sequence[str] | None, seconds: float, concurrency: int
) -> int:
    """Calls per second and latency of ``model.infer`` from ``concurrency`` threads."""
    from tqdm import tqdm

    inputs = _inputs(given)
    with Client(url) as client:
        handle = _answering_once(client.model(model))
        handle.infer(inputs)  # warm, and fail early on a bad input
        latencies: list[float] = []
        lock = threading.Lock()
        stop = time.monotonic() + seconds
        failures: list[BaseException] = []

        def work() -> None:
            while time.monotonic() < stop and not failures:
                started = time.perf_counter()
                try:
                    handle.infer(inputs)
                except TritonError as error:
                    failures.append(error)
                    return
                with lock:
                    latencies.append(time.perf_counter() - started)

        threads = [threading.Thread(target=work) for _ in range(concurrency)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        shown = sys.stderr is not None and sys.stderr.isatty()  # (no frames in a log file)
        with tqdm(
            total=round(seconds, 1), unit="s", file=sys.stderr, leave=False, disable=not shown
        ) as bar:
            while any(thread.is_alive() for thread in threads):
                time.sleep(0.1)
                bar.n = round(min(time.monotonic() - started, seconds), 1)
                bar.refresh()
        for thread in threads:
            thread.join()
    if failures:
        raise failures[0]
    if not latencies:
        raise UsageError("no call finished in time; give more --seconds")
    elapsed = time.monotonic() - started
    quantiles = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else latencies * 99
    print(
        f"{model}: {len(latencies)} calls in {elapsed:.1f} s from {concurrency} threads: "
        f"{len(latencies) / elapsed:.1f} calls/s, latency p50 {quantiles[49] * 1e3:.2f} ms, "
        f"p99 {quantiles[98] * 1e3:.2f} ms"
    )
    return 0


def install_server_command() -> int:
    """Install the server (and, under numpy 2, its models' environment) ahead of time."""
    from .local import find_tritonserver, models_environment

    installation = find_tritonserver()
    print(f"tritonserver: {installation.binary}")
    environment = models_environment(None)
    where = "this environment" if environment is None else str(environment)
    print(f"Python-backend models run in: {where}")
    return 0


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def serve(repository: Path, ports: tuple[int, int, int] | None) -> int:
    from .local import LocalServer

    # Stop the server on SIGTERM too, not only on Ctrl+C.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    with LocalServer(repository, ports=ports) as server:
        print(f"Serving {repository}")
        print(f"  gRPC     {server.grpc_url}")
        print(f"  HTTP     {server.http_url}")
        print(f"  metrics  {server.metrics_url}")
        print(f"  log      {server.log_path}")
        print("Press Ctrl+C to stop.", flush=True)
        try:
            while server.running:
                time.sleep(1)
            print(f"The server stopped on its own; log {server.log_path}:")
            print(server.log_tail())
            server.stop(keep_log=True)  # (the path above is the one to read)
            return 1
        except KeyboardInterrupt:
            print("Stopping.")
    # Stopped by Ctrl+C, the server down now: "interrupted" and exit 130, as any command.
    raise KeyboardInterrupt


def _ports(args: argparse.Namespace) -> tuple[int, int, int] | None:
    chosen = (args.http_port, args.grpc_port, args.metrics_port)
    if all(port is None for port in chosen):
        return None
    if any(port is None for port in chosen):
        raise UsageError("give --http-port, --grpc-port and --metrics-port together")
    if len(set(chosen)) < len(chosen):
        raise UsageError("--http-port, --grpc-port and --metrics-port must be three ports")
    return (args.http_port, args.grpc_port, args.metrics_port)


# The demo


TEXTS = ["안녕하세요", "hello", "hello, world"]


def _cosine(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def _report(
    label: str, embeddings: npt.NDArray[np.float32], sums: npt.NDArray[np.float32], elapsed: float
) -> None:
    tag = f"[{label:<12}]"
    print(f"{tag} text_embed.infer(TEXT={TEXTS})")
    print(
        f"{tag}   -> OUTPUT {embeddings.dtype} {embeddings.shape}, cosine similarity: "
        f"'hello'~'hello, world' {_cosine(embeddings[1], embeddings[2]):.2f}, "
        f"'hello'~'안녕하세요' {_cosine(embeddings[1], embeddings[0]):.2f}"
    )
    print(f"{tag} add_sub.infer(INPUT0=[1, 2, 3, 4], INPUT1=[10, 20, 30, 40])")
    print(f"{tag}   -> OUTPUT0 {sums}  ({elapsed * 1000:.1f} ms for both calls)")


def _run_sync(url: str, label: str) -> None:
    with Client(url) as client:
        embed = client.model("text_embed")
        add_sub = client.model("add_sub")
        started = time.perf_counter()
        embeddings = embed.infer(TEXT=TEXTS)["OUTPUT"]
        sums = add_sub.infer(INPUT0=[1, 2, 3, 4], INPUT1=[10, 20, 30, 40])["OUTPUT0"]
        _report(label, embeddings, sums, time.perf_counter() - started)


async def _run_async(url: str, label: str) -> None:
    async with AsyncClient(url) as client:
        embed = await client.model("text_embed")
        add_sub = await client.model("add_sub")
        started = time.perf_counter()
        embedded, added = await asyncio.gather(
            embed.infer(TEXT=TEXTS),
            add_sub.infer(INPUT0=[1, 2, 3, 4], INPUT1=[10, 20, 30, 40]),
        )
        _report(label, embedded["OUTPUT"], added["OUTPUT0"], time.perf_counter() - started)


def demo(repository: Path) -> int:
    from .local import LocalServer

    print(f"Starting a local Triton server on {repository} ...")
    with LocalServer(repository) as server:
        with Client(server.grpc_url) as client:
            meta = client.server_metadata()
            print(f"{meta.name} {meta.version} is ready at {server.grpc_url} and {server.http_url}")
            print()
            for name in ("text_embed", "add_sub"):
                print(describe(client.model(name).spec))
            print()
        _run_sync(server.grpc_url, "gRPC")
        _run_sync(server.http_url, "HTTP")
        asyncio.run(_run_async(server.grpc_url, "gRPC asyncio"))
        asyncio.run(_run_async(server.http_url, "HTTP asyncio"))
        print()
        print("Stopping the server.")
    return 0


# Typed stubs


def stubgen(url: str, chosen: list[str] | None, output: Path, check: bool) -> int:
    """Write the typed module for the ``chosen`` models of the server at ``url`` (every
    ready model when none is named), or with ``check`` say whether ``output`` matches."""
    from ._stubgen import class_names, differences, render, same_code

    with Client(url) as client:
        names = sorted(
            set(chosen)
            if chosen
            else {status.name for status in client.models() if status.state == "READY"}
        )
        try:
            specs = [client.model_spec(name) for name in names]
        except (ModelNotFoundError, ModelNotReadyError) as error:
            if not check:
                raise
            # The server answered: its models are not those of the module.
            print(f"stubgen: {output} cannot match the models of {url}: {error}")
            return 1
    text = render(specs)
    if check:
        if not output.exists():
            print(f"stubgen: {output} does not exist; run without --check to write it")
            return 1
        try:
            written = output.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise UsageError(f"cannot read {output}: {error}") from None
        if same_code(written, text):
            print(f"{output} matches the models of {url}")
            return 0
        print(f"stubgen: {output} is not what stubgen writes now for {url}:")
        print(differences(written, text, str(output)))
        return 1
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot write {output}: {error}") from None
    names_of = class_names(spec.name for spec in specs)
    classes = ", ".join(names_of[spec.name] for spec in specs)
    print(f"wrote {output}: {classes} (and their Async twins)")
    return 0


# The parser


def _port(text: str) -> int:
    port = int(text)
    if not 1 <= port <= 65535:
        raise ValueError(text)
    return port


_port.__name__ = "port"  # (argparse names the type in its message: "invalid port value")


MAX_BENCH_THREADS: Final = 1024
"""More threads than this measure the machine, not the server (and a huge count hung
while the threads were made)."""


def _threads(text: str) -> int:
    count = int(text)
    if not 1 <= count <= MAX_BENCH_THREADS:
        raise ValueError(text)
    return count


_threads.__name__ = "thread count"


def _seconds(text: str) -> float:
    seconds = float(text)
    if not 0 < seconds < NO_LIMIT_FROM:  # (NaN compares False)
        raise ValueError(text)
    return seconds


_seconds.__name__ = "seconds"


def _one_line(text: str) -> str:
    """``text`` on one line: a server's message may carry a traceback (a Python model
    that failed to load), which would break a table's rows or a one-line error."""
    return re.sub(r"\s*\n\s*", " ", text.strip()) if "\n" in text else text


def _complain(line: str) -> None:
    """Print ``line`` on stderr, on one line. With stderr closed (``2>&-``: ``sys.stderr``
    is None; a bare ``print`` would then write to stdout, among the command's output) or
    its reader gone, the line is lost and the exit code alone says what happened."""
    stream = sys.stderr
    if stream is None:
        return
    try:
        print(_one_line(line), file=stream, flush=True)
    except OSError:  # BrokenPipeError, EBADF: there is no one left to tell
        return


def _program() -> str:
    return "triton-sdk" if Path(sys.argv[0]).name == "triton-sdk" else "python -m triton_sdk"


def parser() -> argparse.ArgumentParser:
    from . import __version__

    top = argparse.ArgumentParser(
        prog=_program(),
        description="A typed client for NVIDIA Triton Inference Server, on the command line.",
    )
    top.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, *, url: bool = True, model: bool = False) -> Any:
        sub = commands.add_parser(name, help=help, description=help)
        if url:
            sub.add_argument("url", help="the server, e.g. grpc://localhost:8001")
        if model:
            sub.add_argument("model", help="the model's name")
        return sub

    command("models", "list the models of the repository, with their state")
    command("describe", "show a model's inputs, outputs and batching", model=True)
    health_parser = command("health", "is the server (and a model) live and ready")
    health_parser.add_argument("-m", "--model", help="also whether this model is ready")
    for name, what in (("infer", "run one request"), ("bench", "measure calls/s and latency")):
        sub = command(name, what, model=True)
        sub.add_argument(
            "-i",
            "--input",
            action="append",
            metavar="NAME=VALUE",
            help="an input: JSON (e.g. '[1, 2]'), a word (a string), @file.npy or @file.json",
        )
    infer_parser = commands.choices["infer"]
    infer_parser.add_argument("--sample", action="store_true", help="one sample, no batch axis")
    infer_parser.add_argument("-o", "--output-dir", type=Path, help="write each output as .npy")
    bench_parser = commands.choices["bench"]
    bench_parser.add_argument("--seconds", type=_seconds, default=5.0)
    bench_parser.add_argument("-c", "--concurrency", type=_threads, default=1, help="threads")
    command("load", "load a model (explicit model control)", model=True)
    command("unload", "unload a model (explicit model control)", model=True)
    serve_parser = command("serve", "serve a model repository locally", url=False)
    serve_parser.add_argument("repository", type=Path, nargs="?", default=EXAMPLE_MODELS)
    for port in ("http", "grpc", "metrics"):
        serve_parser.add_argument(f"--{port}-port", type=_port, help="free ports by default")
    command("install-server", "install the local server now (else on first use)", url=False)
    demo_parser = command("demo", "start a server on the example models and use them", url=False)
    demo_parser.add_argument("--repository", type=Path, default=EXAMPLE_MODELS)
    stub_parser = command("stubgen", "write typed per-model classes for models of a server")
    stub_parser.add_argument(
        "-m",
        "--model",
        action="append",
        dest="models",
        help="a model to write a class for (repeat it); every ready model by default",
    )
    stub_parser.add_argument("-o", "--output", type=Path, required=True, help="the module")
    stub_parser.add_argument(
        "--check",
        action="store_true",
        help="exit 0 if the module is what stubgen writes now, 1 (showing what differs) if not",
    )
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    stdout = sys.stdout
    if not isinstance(stdout, io.TextIOWrapper):
        return _run(args)
    # A value the terminal's encoding lacks (PYTHONIOENCODING=ascii) prints escaped,
    # rather than ending the command with a traceback after the server answered; for the
    # command only (main may run inside a program of its own).
    errors = stdout.errors
    stdout.reconfigure(errors="backslashreplace")
    try:
        return _run(args)
    finally:
        stdout.reconfigure(errors=errors)


def _run(args: argparse.Namespace) -> int:
    runs: dict[str, Callable[[], int]] = {
        "models": lambda: models(args.url),
        "describe": lambda: describe_command(args.url, args.model),
        "health": lambda: health(args.url, args.model),
        "infer": lambda: infer(args.url, args.model, args.input, args.sample, args.output_dir),
        "bench": lambda: bench(args.url, args.model, args.input, args.seconds, args.concurrency),
        "load": lambda: load(args.url, args.model),
        "unload": lambda: unload(args.url, args.model),
        "serve": lambda: serve(args.repository, _ports(args)),
        "demo": lambda: demo(args.repository),
        "install-server": install_server_command,
        "stubgen": lambda: stubgen(args.url, args.models, args.output, args.check),
    }
    try:
        code = runs[args.command]()
        sys.stdout.flush()  # (a pipe's buffer is written here, where a closed one is caught)
        return code
    except (TritonError, UsageError, ServerStartError) as error:
        said = str(error)
        head = said.split(":\n", 1)[0]  # (what the log's tail says is not the cause)
        if isinstance(error, ServerStartError) and _PORT_CLASH in head.lower():
            # The log's path, without the log's tail: its tables (which say nothing of the
            # port) made one line of kilobytes. A model that failed to load keeps it.
            said = head
        _complain(f"{_program()} {args.command}: {said}")
        return 2
    except BrokenPipeError:
        # The reader left (`| head -1`): end quietly, as a process killed by SIGPIPE does.
        # What is still buffered must not fail again at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE
    except OSError as error:
        if error.errno not in _NO_ROOM:
            raise
        # Writing the output failed (`> /dev/full`): the commands' own files report their
        # errors themselves. What is still buffered must not fail again at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        _complain(f"{_program()} {args.command}: cannot write the output: {error}")
        return 2
    except KeyboardInterrupt:
        _complain(f"{_program()} {args.command}: interrupted")
        return 130  # 128 + SIGINT
