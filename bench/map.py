"""``model.map`` against the model's capacity: how close bulk inference gets to the server.

Starts one local tritonserver with a model whose capacity is known: one instance that
takes batches of up to ``--batch`` samples and spends ``--ms`` milliseconds on each
batch, whatever its size, so it can serve at most batch / ms samples per millisecond.
``model.map`` then runs ``--batches`` full batches' worth of samples (one FP32 [16]
input each) with its defaults, over gRPC and HTTP, and the script prints the samples
per second reached and their share of the capacity (the target: at least 90 %).

    python bench/map.py
    python bench/map.py --ms 50 --batch 64

Needs the server extra: pip install "triton-sdk-py[server]".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from large import MODEL as COPY_MODEL

import triton_sdk as ts
from triton_sdk.local import LocalServer

# The copy model of large.py, paced: each batch takes the same time, whatever its size.
MODEL = "import time\n\n" + COPY_MODEL.replace(
    "    def execute(self, requests):\n",
    "    def execute(self, requests):\n        time.sleep({seconds})\n",
)

CONFIG = """\
name: "paced"
backend: "python"
max_batch_size: {batch}
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 16 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 16 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""


def repository(folder: Path, batch: int, ms: float) -> Path:
    model = folder / "paced"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG.format(batch=batch))
    (model / "1" / "model.py").write_text(MODEL.format(seconds=ms / 1000))
    return folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=32, help="the model's max batch size")
    parser.add_argument("--ms", type=float, default=20.0, help="time per batch")
    parser.add_argument("--batches", type=int, default=100, help="full batches of samples")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    capacity = args.batch / (args.ms / 1000)
    count = args.batch * args.batches
    rng = np.random.default_rng(0)
    samples = [{"X": rng.random(16, dtype=np.float32)} for _ in range(count)]
    print(
        f"model: batches of up to {args.batch}, {args.ms} ms each, one instance: "
        f"capacity {capacity:.0f} samples/s; {count} samples per run"
    )
    with (
        tempfile.TemporaryDirectory() as folder,
        LocalServer(repository(Path(folder), args.batch, args.ms)) as server,
    ):
        for url in (server.grpc_url, server.http_url):
            with ts.Client(url) as client:
                model = client.model("paced")
                list(model.map(samples[: args.batch * 4]))  # warm up
                rates = []
                for _ in range(args.rounds):
                    began = time.perf_counter()
                    results = list(model.map(samples))
                    rates.append(count / (time.perf_counter() - began))
                    np.testing.assert_array_equal(results[-1]["Y"], samples[-1]["X"])
                rate = statistics.median(rates)
                print(
                    f"{url.split(':')[0]:<5} {rate:8.0f} samples/s   {rate / capacity:6.1%} "
                    "of capacity (target >= 90%)",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
