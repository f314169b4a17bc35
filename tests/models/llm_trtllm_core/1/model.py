"""Answers as TensorRT-LLM's tensorrtllm backend (with its postprocessing) does, with the
fake LLM of ../_fake_llm; the llm_trtllm ensemble's only step.

Inputs arrive with a batch axis. Every batch item, and every one of its
num_return_sequences, is answered in responses of its own, shaped [1, ...] (one beam),
as the real backend does: batch_index is sent only when the batch has more than one item,
sequence_index only when num_return_sequences > 1. max_tokens and stop_words act;
sampling inputs are accepted and ignored; beam_width > 1 is refused. Non-streaming, the
text starts with the prompt unless exclude_input_in_output (and num_output_tokens then
counts the prompt's tokens too, as the real backend's does). cum_log_probs and
output_log_probs (every token -0.5) are sent only when return_log_probs is true,
num_input_tokens / num_output_tokens only when asked for: the real backend leaves out
what it was not asked for.
"""

import sys
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_fake_llm"))
import fake_llm as llm


class Sequence:
    """One batch item's sequence: its choice and the outputs its item asked for."""

    def __init__(self, request, item: int, index: int, batch_size: int, sequences: int) -> None:
        def value(name, default=None):
            array = llm.read(request, name)
            return default if array is None else llm.first(array[item], default)

        self.prompt = value("text_input")
        max_tokens = value("max_tokens")
        if max_tokens is None:
            raise ValueError("max_tokens is required")
        if value("beam_width", 1) != 1:
            raise ValueError("beam_width > 1 is not supported by this test model")
        stop_words = llm.read(request, "stop_words")
        stop = llm.strings(None if stop_words is None else stop_words[item])
        self.choice = llm.complete(self.prompt, index, max_tokens, stop)
        self.exclude = bool(value("exclude_input_in_output", False))
        self.log_probs = bool(value("return_log_probs", False))
        self.count_input = bool(value("return_num_input_tokens", False))
        self.count_output = bool(value("return_num_output_tokens", False))
        self.item, self.index = item, index
        self.batch_size, self.sequences = batch_size, sequences

    @property
    def steps(self) -> int:
        return max(1, len(self.choice.pieces))

    def respond(self, step):
        """The response for step ``step`` (its token), or for the whole text (None)."""
        pieces = self.choice.pieces if step is None else self.choice.pieces[step : step + 1]
        start = 0 if step is None else step
        echo = step is None and not self.exclude
        text = (self.prompt if echo else "") + "".join(pieces)
        outputs = [llm.texts("text_output", [text], [1, 1])]
        if self.log_probs:
            total = llm.LOGPROB * (start + len(pieces))
            outputs.append(pb_utils.Tensor("cum_log_probs", np.full((1, 1), total, np.float32)))
            step_log_probs = np.full((1, 1, len(pieces)), llm.LOGPROB, np.float32)
            outputs.append(pb_utils.Tensor("output_log_probs", step_log_probs))
        if self.batch_size > 1:
            outputs.append(pb_utils.Tensor("batch_index", np.full((1, 1), self.item, np.int32)))
        if self.sequences > 1:
            outputs.append(pb_utils.Tensor("sequence_index", np.full((1, 1), self.index, np.int32)))
        prompt_tokens = llm.prompt_tokens(self.prompt)
        if self.count_input:
            outputs.append(
                pb_utils.Tensor("num_input_tokens", np.full((1, 1), prompt_tokens, np.int32))
            )
        if self.count_output:
            count = len(pieces) + (prompt_tokens if echo else 0)
            outputs.append(pb_utils.Tensor("num_output_tokens", np.full((1, 1), count, np.int32)))
        return pb_utils.InferenceResponse(output_tensors=outputs)


def sequences_of(request) -> list:
    batch_size = llm.read(request, "text_input").shape[0]
    counts = llm.read(request, "num_return_sequences")
    sequences = []
    for item in range(batch_size):
        n = 1 if counts is None else llm.first(counts[item])
        if n < 1:
            raise ValueError(f"num_return_sequences must be at least 1, got {n}")
        sequences += [Sequence(request, item, index, batch_size, n) for index in range(n)]
    return sequences


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                sequences = sequences_of(request)
            except ValueError as error:
                llm.fail(sender, str(error))
                continue
            stream = bool(llm.first(llm.read(request, "stream"), False))

            def respond(step, sequences=sequences):
                return [s.respond(step) for s in sequences if step is None or step < s.steps]

            steps = max(sequence.steps for sequence in sequences)
            explode = any(llm.explodes(sequence.prompt) for sequence in sequences)
            llm.serve(sender, steps, respond, stream, explode)
