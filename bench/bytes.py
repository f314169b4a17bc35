"""BYTES tensors: triton_sdk's encoding and decoding against tritonclient's, side by side.

No server is needed: this times the client-side work on BYTES data, which grows with the
number of elements. For each case (by default 100,000 short strings) it compares:

- encode, from the same Python list to the bytes that go into the request:
  - tritonclient: ``np.array(items, dtype=np.object_)``, then
    ``InferInput("X", shape, "BYTES").set_data_from_numpy(array)``, then the serialized
    bytes that input keeps (``_raw_content``: what the gRPC client sends as the input's
    raw contents; the HTTP client serializes the same way);
  - sdk: shaping (``prepare_inputs``: the one pass that checks and encodes every element)
    and the wire payload (``_wire.tensor_payload``);
- decode, from the raw bytes of a BYTES output to an object array of its shape:
  - tritonclient: ``deserialize_bytes_tensor(raw).reshape(shape)``, as ``as_numpy`` does;
  - sdk: ``_result.decode_output``, as ``InferResult`` does.

The variants run in one process, interleaved: each round runs each variant once, and
which one goes first alternates from round to round; garbage is collected before each
round. Before timing, the script checks that both variants give the same bytes and the
same elements. Per case and step it prints the median time of each variant over the
rounds, the speed-up (tritonclient's median over the sdk's), the median and range of
the rounds' speed-ups, and, where there is one, whether the target is met.

    python bench/bytes.py                               # all cases, 100,000 elements each
    python bench/bytes.py --cases ascii --rounds 30     # the case of the target only
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata
from typing import Any, NamedTuple

import numpy as np
import tritonclient.grpc
from tritonclient.utils import deserialize_bytes_tensor

from triton_sdk import ModelSpec, TensorSpec
from triton_sdk._result import decode_output
from triton_sdk._shaping import prepare_inputs
from triton_sdk._wire import tensor_payload

Array = np.ndarray[Any, Any]
Step = Callable[[], Any]

VARIANTS = ("tritonclient", "sdk")
TARGETS = {("ascii", "encode"): 2.5, ("ascii-array", "encode"): 2.5}
"""The smallest acceptable speed-up (tritonclient's median time over the sdk's)."""

SPEC = ModelSpec(
    name="bytes",
    inputs={"X": TensorSpec(name="X", datatype="BYTES", shape=(-1,))},
    outputs={"Y": TensorSpec(name="Y", datatype="BYTES", shape=(-1,))},
)


# The data


def short_ascii(count: int, rng: np.random.Generator) -> list[str]:
    """Words of 1 to 24 ASCII letters, digits and spaces."""
    alphabet = np.array(list("abcdefghijklmnopqrstuvwxyz0123456789 "))
    lengths = rng.integers(1, 25, size=count)
    letters = rng.choice(alphabet, size=int(lengths.sum()))
    text = "".join(letters.tolist())
    ends = np.cumsum(lengths).tolist()
    return [text[end - length : end] for end, length in zip(ends, lengths.tolist(), strict=True)]


def short_utf8(count: int, rng: np.random.Generator) -> list[str]:
    """Short words with accents, Hangul and emoji among ASCII."""
    extra = ["é", "ß", "안녕", "世界", "🙂", "ñ"]
    words = short_ascii(count, rng)
    picks = rng.integers(0, len(extra), size=count).tolist()
    return [word + extra[pick] for word, pick in zip(words, picks, strict=True)]


def short_bytes(count: int, rng: np.random.Generator) -> list[bytes]:
    return [word.encode() for word in short_ascii(count, rng)]


def uniform_bytes(count: int, rng: np.random.Generator) -> list[bytes]:
    """Elements of one length (16 random bytes, such as ids or hashes)."""
    data = rng.integers(0, 256, size=(count, 16), dtype=np.uint8)
    return [row.tobytes() for row in data]


def long_text(count: int, rng: np.random.Generator) -> list[str]:
    """count // 1000 documents of 64 KiB of ASCII."""
    block = "".join(short_ascii(8000, rng))[: 64 * 1024]
    return [block] * max(1, count // 1000)


CASES: dict[str, tuple[Callable[[int, np.random.Generator], list[Any]], bool, str]] = {
    "ascii": (short_ascii, False, "short ASCII str (1-24 chars), from a list"),
    "ascii-array": (short_ascii, True, "the same, from an np.object_ array"),
    "utf8": (short_utf8, False, "short str with non-ASCII text, from a list"),
    "bytes": (short_bytes, False, "short bytes, from a list"),
    "uniform": (uniform_bytes, False, "bytes of 16 bytes each, from a list"),
    "long": (long_text, False, "64 KiB str, count // 1000 of them, from a list"),
}
"""name -> (the elements, whether both variants start from an object array, description)"""


# The variants


def object_array(items: Sequence[Any]) -> Array:
    array: Array = np.empty(len(items), dtype=np.object_)
    array[:] = items
    return array


def encode_steps(items: Sequence[Any], from_array: bool) -> dict[str, Step]:
    source: Any = object_array(items) if from_array else list(items)
    shape = [len(items)]

    def with_tritonclient() -> bytes:
        array = source if from_array else np.array(source, dtype=np.object_)
        tensor = tritonclient.grpc.InferInput("X", shape, "BYTES")
        tensor.set_data_from_numpy(array)
        raw: bytes = tensor._raw_content
        return raw

    def with_sdk() -> bytes:
        (tensor,) = prepare_inputs(SPEC, {"X": source}).tensors
        return bytes(tensor_payload(tensor))  # already bytes for BYTES: no copy

    return {"tritonclient": with_tritonclient, "sdk": with_sdk}


def decode_steps(raw: bytes, count: int) -> dict[str, Step]:
    shape = (count,)

    def with_tritonclient() -> Array:
        decoded: Array = deserialize_bytes_tensor(raw).reshape(shape)
        return decoded

    def with_sdk() -> Array:
        return decode_output("Y", "BYTES", shape, raw)

    return {"tritonclient": with_tritonclient, "sdk": with_sdk}


def check_same(case: str, step: str, steps: dict[str, Step]) -> Any:
    """Both variants must give the same result before their speed means anything."""
    answers = {variant: call() for variant, call in steps.items()}
    expected = answers["tritonclient"]
    for variant, answer in answers.items():
        if isinstance(expected, np.ndarray):
            same = answer.shape == expected.shape and answer.tolist() == expected.tolist()
        else:
            same = answer == expected
        if not same:
            raise AssertionError(f"{case} {step}: {variant} differs from tritonclient")
    return expected


# Timing


class Row(NamedTuple):
    case: str
    step: str
    tritonclient_ms: float
    sdk_ms: float
    speedup: float
    round_speedup: float
    round_low: float
    round_high: float
    target: float | None

    @property
    def met(self) -> bool | None:
        return None if self.target is None else self.speedup >= self.target


def orders(rounds: int) -> Iterator[tuple[str, ...]]:
    """The order of the variants in each round: it alternates, so neither always leads."""
    for index in range(rounds):
        gc.collect()
        yield VARIANTS if index % 2 == 0 else VARIANTS[::-1]


def measure(case: str, step: str, steps: dict[str, Step], rounds: int, warmup: int) -> Row:
    for _ in range(warmup):
        for call in steps.values():
            call()
    clock = time.perf_counter
    samples: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    round_speedups: list[float] = []
    for order in orders(rounds):
        this_round: dict[str, float] = {}
        for variant in order:
            call = steps[variant]
            start = clock()
            call()
            this_round[variant] = clock() - start
        for variant, seconds in this_round.items():
            samples[variant].append(seconds)
        round_speedups.append(this_round["tritonclient"] / this_round["sdk"])
    tritonclient_s, sdk_s = (statistics.median(samples[variant]) for variant in VARIANTS)
    return Row(
        case=case,
        step=step,
        tritonclient_ms=tritonclient_s * 1e3,
        sdk_ms=sdk_s * 1e3,
        speedup=tritonclient_s / sdk_s,
        round_speedup=statistics.median(round_speedups),
        round_low=min(round_speedups),
        round_high=max(round_speedups),
        target=TARGETS.get((case, step)),
    )


# Output

HEADER = (
    f"{'case':<12} {'step':<7} {'tritonclient ms':>15} {'sdk ms':>8} {'speed-up':>9} "
    f"{'per-round speed-up (min-max)':>29} {'target':>7}  met"
)


def format_row(row: Row) -> str:
    spread = f"{row.round_speedup:.2f}x ({row.round_low:.2f}-{row.round_high:.2f})"
    target = "-" if row.target is None else f">={row.target:.1f}x"
    met = "-" if row.met is None else ("yes" if row.met else "NO")
    return (
        f"{row.case:<12} {row.step:<7} {row.tritonclient_ms:15.2f} {row.sdk_ms:8.2f} "
        f"{row.speedup:8.2f}x {spread:>29} {target:>7}  {met}"
    )


def describe_setup(args: argparse.Namespace) -> str:
    versions = ", ".join(
        f"{name} {metadata.version(name)}" for name in ("triton-sdk-py", "tritonclient", "numpy")
    )
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    cases = "\n".join(f"  {name:<12} {CASES[name][2]}" for name in args.cases)
    return (
        f"Python {platform.python_version()}, {versions}\n"
        f"{os.cpu_count()} CPUs, load average {load}\n"
        f"{args.rounds} rounds per case and step, {args.warmup} warm-up runs; "
        f"{args.count} elements per case:\n{cases}"
    )


# Entry point


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="BYTES encoding and decoding: triton_sdk against tritonclient.",
    )
    parser.add_argument("--count", type=int, default=100_000, help="elements (100000)")
    parser.add_argument("--rounds", type=int, default=15, help="rounds per case and step (15)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs first (2)")
    parser.add_argument(
        "--cases",
        nargs="+",
        choices=list(CASES),
        default=list(CASES),
        metavar="CASE",
        help=f"any of {' '.join(CASES)} (default: all)",
    )
    args = parser.parse_args(argv)
    if args.count < 1 or args.rounds < 1 or args.warmup < 0:
        parser.error("--count and --rounds must be >= 1, --warmup >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    print(describe_setup(args) + "\n")
    print(HEADER, flush=True)
    began = time.perf_counter()
    rows: list[Row] = []
    for case in args.cases:
        make, from_array, _ = CASES[case]
        items = make(args.count, np.random.default_rng(0))
        encode = encode_steps(items, from_array)
        raw = check_same(case, "encode", encode)
        decode = decode_steps(raw, len(items))
        check_same(case, "decode", decode)
        for step, steps in (("encode", encode), ("decode", decode)):
            rows.append(measure(case, step, steps, args.rounds, args.warmup))
            print(format_row(rows[-1]), flush=True)
    targets = [row for row in rows if row.met is not None]
    print(
        "\nspeed-up: tritonclient's median time over the sdk's; per-round: median and range "
        "of the rounds' speed-ups.\n"
        f"{sum(bool(row.met) for row in targets)} of {len(targets)} targets met; "
        f"total {time.perf_counter() - began:.0f}s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
