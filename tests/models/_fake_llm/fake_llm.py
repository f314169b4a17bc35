"""A deterministic stand-in for an LLM, shared by the llm_* test models.

A prompt's token count is its number of words. Choice i of a completion is token 0,
``"P" + sha256(prompt)[:8]`` (it proves which exact prompt arrived), then " alpha",
" bravo", ... cycling through VOCAB from offset i. It ends by itself ("stop") after 8
tokens, never when the prompt has the word "forever"; max_tokens ends it earlier
("length"); a stop string cuts the text before it ("stop"). Every token has log
probability -0.5. Each token step takes 5 ms and may be cancelled. A prompt with the
word "explode" fails after 2 streamed steps (at once when not streaming).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import triton_python_backend_utils as pb_utils

VOCAB = "alpha bravo charlie delta echo foxtrot golf hotel india juliett kilo lima".split()  # noqa: SIM905
NATURAL_LENGTH = 8
FOREVER_LENGTH = 100_000
STEP_SECONDS = 0.005
LOGPROB = -0.5
FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def prompt_tokens(prompt: str) -> int:
    return len(prompt.split())


def explodes(prompt: str) -> bool:
    return "explode" in prompt.split()


def token_id(position: int, choice: int) -> int:
    return 0 if position == 0 else 1 + (position - 1 + choice) % len(VOCAB)


@dataclass
class Choice:
    pieces: list[str]  # the text of each token step, the last one cut by a stop string
    finish_reason: str  # "stop" or "length"
    stop_reason: str | None  # the stop string that ended it

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def complete(
    prompt: str, index: int = 0, max_tokens: int | None = None, stop: Sequence[str] = ()
) -> Choice:
    """Choice ``index`` of the completion of ``prompt``."""
    natural = FOREVER_LENGTH if "forever" in prompt.split() else NATURAL_LENGTH
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}.")
    count = natural if max_tokens is None else min(max_tokens, natural)
    tag = "P" + hashlib.sha256(prompt.encode()).hexdigest()[:8]
    pieces = [tag] + [" " + VOCAB[(k - 1 + index) % len(VOCAB)] for k in range(1, count)]
    text = "".join(pieces)
    found = [(text.find(word), word) for word in stop if word and word in text]
    if not found:
        return Choice(pieces, "length" if count < natural else "stop", None)
    cut, word = min(found)
    kept: list[str] = []
    start = 0
    for piece in pieces:
        if start >= cut:
            break
        kept.append(piece[: cut - start])
        start += len(piece)
    return Choice(kept, "stop", word)


# Reading inputs


def read(request: pb_utils.InferenceRequest, name: str) -> np.ndarray | None:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


def first(array: np.ndarray | None, default=None):
    """The first element of an input as a Python value (bytes decoded), or ``default``."""
    if array is None or array.size == 0:
        return default
    item = array.reshape(-1)[0]
    return item.decode("utf-8") if isinstance(item, bytes) else item.item()


def strings(array: np.ndarray | None) -> list[str]:
    """The non-empty strings of a BYTES input."""
    if array is None:
        return []
    return [item.decode("utf-8") for item in array.reshape(-1) if item]


def texts(name: str, values: Sequence[str], shape: Sequence[int] | None = None) -> pb_utils.Tensor:
    """A BYTES output tensor of ``values`` (UTF-8), reshaped to ``shape`` when given."""
    array = np.array([value.encode("utf-8") for value in values], dtype=np.object_)
    return pb_utils.Tensor(name, array if shape is None else array.reshape(shape))


# Sending responses


def fail(sender, message: str, code=None) -> None:
    error = pb_utils.TritonError(message) if code is None else pb_utils.TritonError(message, code)
    sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)


def _send(sender, responses: list, final: bool) -> None:
    for i, response in enumerate(responses):
        sender.send(response, flags=FINAL if final and i == len(responses) - 1 else 0)


def serve(
    sender,
    steps: int,
    respond: Callable[[int | None], list],
    streaming: bool,
    explode: bool = False,
) -> None:
    """Run ``steps`` token steps, STEP_SECONDS each, sending what ``respond`` makes.

    Streaming, ``respond(k)`` gives step k's responses; otherwise ``respond(None)``
    gives the whole completion's, sent after the last step. The last response carries
    the FINAL flag. A cancelled request stops quietly (only the FINAL flag). ``explode``:
    an error after 2 streamed steps, at once when not streaming.
    """
    for k in range(0 if explode and not streaming else steps):
        if sender.is_cancelled():
            sender.send(flags=FINAL)
            return
        time.sleep(STEP_SECONDS)
        if explode and k == 2:
            break
        if streaming:
            _send(sender, respond(k), final=k == steps - 1 and not explode)
    if explode:
        fail(sender, "the model exploded")
    elif not streaming:
        _send(sender, respond(None), final=True)
