"""``python -m triton_sdk``: a demo against a local real server, and a way to run one.

python -m triton_sdk demo           start a server on the example models and use them
python -m triton_sdk serve REPO     serve a model repository until interrupted
python -m triton_sdk stubgen URL -m MODEL -o models.py [--check]
                                    write (or check) typed classes for models of a server
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ._async_client import AsyncClient
from ._client import Client
from ._spec import ModelSpec

EXAMPLE_MODELS = Path(__file__).resolve().parent / "examples" / "models"

TEXTS = ["안녕하세요", "hello", "hello, world"]


def describe(spec: ModelSpec) -> str:
    """A few lines showing what a model takes and returns."""
    batching = f"max_batch_size {spec.max_batch_size}" if spec.batched else "no batch axis"
    extras = ", dynamic batching" if spec.dynamic_batching else ""
    lines = [f"{spec.name}  ({spec.backend or spec.platform}, {batching}{extras})"]
    for kind, tensors in (("input ", spec.inputs), ("output", spec.outputs)):
        for tensor in tensors.values():
            optional = "  (optional)" if tensor.optional else ""
            shape = list(tensor.shape)
            lines.append(f"  {kind}  {tensor.name:<8} {tensor.datatype:<6} {shape}{optional}")
    return "\n".join(lines)


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


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def serve(repository: Path) -> int:
    from .local import LocalServer

    # Stop the server on SIGTERM too, not only on Ctrl+C.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    with LocalServer(repository) as server:
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
            return 1
        except KeyboardInterrupt:
            print("Stopping.")
    return 0


def stubgen(url: str, models: list[str] | None, output: Path, check: bool) -> int:
    """Write the typed module for ``models`` of the server at ``url`` (every ready model
    when none is named), or with ``check`` say whether ``output`` still matches."""
    from ._errors import TritonError
    from ._stubgen import class_name, differences, render

    try:
        with Client(url) as client:
            names = models or sorted(
                {status.name for status in client.models() if status.state == "READY"}
            )
            specs = [client.model_spec(name) for name in names]
    except TritonError as error:
        print(f"stubgen: {error}", file=sys.stderr)
        return 2
    text = render(specs)
    if check:
        if not output.is_file():
            print(f"stubgen: {output} does not exist; run without --check to write it")
            return 1
        written = output.read_text(encoding="utf-8")
        if written == text:
            print(f"{output} matches the models of {url}")
            return 0
        print(f"stubgen: {output} is not what stubgen writes now for {url}:")
        print(differences(written, text, str(output)))
        return 1
    output.write_text(text, encoding="utf-8")
    classes = ", ".join(class_name(spec.name) for spec in specs)
    print(f"wrote {output}: {classes} (and their Async twins)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m triton_sdk", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    demo_parser = commands.add_parser("demo", help="run the demo on the example models")
    demo_parser.add_argument("--repository", type=Path, default=EXAMPLE_MODELS)
    serve_parser = commands.add_parser("serve", help="serve a model repository locally")
    serve_parser.add_argument("repository", type=Path, nargs="?", default=EXAMPLE_MODELS)
    stub_parser = commands.add_parser(
        "stubgen", help="write typed per-model classes for models of a server"
    )
    stub_parser.add_argument("url", help="the server, e.g. grpc://localhost:8001")
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
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo(args.repository)
    if args.command == "stubgen":
        return stubgen(args.url, args.models, args.output, args.check)
    return serve(args.repository)


if __name__ == "__main__":
    sys.exit(main())
