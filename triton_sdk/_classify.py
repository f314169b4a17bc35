"""Classification results: Triton's ``"score:index:label"`` strings, typed."""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from ._errors import InferenceError

__all__ = ["Classification", "parse_classifications"]


@attrs.frozen
class Classification:
    """One of a sample's top classes.

    Attributes:
        score: the class's score (the output value): an ``int`` for integer outputs,
            exact at any size, else a float (the server sends six digits after the point).
        index: the class's position in the output.
        label: its name from the output's label file; None when the model has none.
    """

    score: float
    index: int
    label: str | None = None

    @classmethod
    def parse(cls, text: str | bytes) -> Classification:
        """Parse ``"score:index"`` or ``"score:index:label"`` (labels may contain ':')."""
        if not isinstance(text, str | bytes):
            raise InferenceError(
                f"cannot read classification {text!r}: the server answered with a "
                f"{type(text).__name__}, not Triton's 'score:index:label' text (a server "
                "without Triton's classification extension ignores the request for it)"
            )
        try:  # (UnicodeDecodeError is a ValueError)
            value = text.decode("utf-8") if isinstance(text, bytes) else text
            parts = value.split(":", 2)
            score, index = _number(parts[0]), int(parts[1])
        except (ValueError, IndexError) as exc:
            raise InferenceError(f"cannot read classification {text!r}") from exc
        return cls(score, index, parts[2] if len(parts) == 3 else None)


def _number(text: str) -> float:
    """An integer output's score is sent as the integer itself, which a float would round
    past 2**53 (two INT64 classes would then show one score)."""
    digits = text[1:] if text[:1] == "-" else text
    return int(text) if digits.isascii() and digits.isdigit() else float(text)


def parse_classifications(
    array: np.ndarray[Any, Any], *, batched: bool
) -> list[list[Classification]]:
    """Per sample, the list of classes of a classification output (best first)."""
    if batched and not array.shape:
        raise InferenceError("cannot read classifications from an answer without a batch axis")
    if not array.size:
        return [[] for _ in range(array.shape[0] if batched else 1)]
    rows = array.reshape(array.shape[0], -1) if batched else array.reshape(1, -1)
    return [[Classification.parse(item) for item in row] for row in rows]
