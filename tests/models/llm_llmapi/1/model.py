"""Answers as TensorRT-LLM's LLM-API Python model does, with the fake LLM of ../_fake_llm.

sampling_param_max_tokens (default 32, as tensorrt_llm.SamplingParams) and
sampling_param_stop act; the other sampling_param_* inputs are accepted and ignored (one
choice: best_of keeps the best one). Non-streaming: one response, the prompt prepended
unless sampling_param_exclude_input_from_output. Streaming: one response per token step
with the whole text so far, as the real model sends output.text (not its text_diff). finish_reason, stop_reason and cumulative_logprob are sent when their
return_* input is true; the reasons are str() of the real values, "None" while running.
stop=true answers at once with the real model's CANCELLED error (this model runs one
request at a time, so there is nothing to stop).
"""

import sys
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_fake_llm"))
import fake_llm as llm

RETURN_FLAGS = ("return_finish_reason", "return_stop_reason", "return_cumulative_logprob")


class Generation:
    def __init__(self, request) -> None:
        def value(name, default=None):
            return llm.first(llm.read(request, name), default)

        self.prompt = value("text_input")
        self.streaming = bool(value("streaming", False))
        self.echo = not self.streaming and not value(
            "sampling_param_exclude_input_from_output", False
        )
        stop = llm.strings(llm.read(request, "sampling_param_stop"))
        self.choice = llm.complete(self.prompt, 0, value("sampling_param_max_tokens", 32), stop)
        self.steps = max(1, len(self.choice.pieces))
        self.flags = {name: bool(value(name, False)) for name in RETURN_FLAGS}

    def respond(self, step):
        """Step ``step``'s response (the text so far), or the whole completion's (None)."""
        pieces = self.choice.pieces if step is None else self.choice.pieces[: step + 1]
        done = step is None or step == self.steps - 1
        text = (self.prompt if self.echo else "") + "".join(pieces)
        outputs = [llm.texts("text_output", [text])]
        if self.flags["return_finish_reason"]:
            outputs.append(
                llm.texts("finish_reason", [self.choice.finish_reason if done else "None"])
            )
        if self.flags["return_stop_reason"]:
            outputs.append(
                llm.texts("stop_reason", [str(self.choice.stop_reason if done else None)])
            )
        if self.flags["return_cumulative_logprob"]:
            total = llm.LOGPROB * (
                len(self.choice.pieces) if step is None else min(step + 1, len(self.choice.pieces))
            )
            outputs.append(pb_utils.Tensor("cumulative_logprob", np.array([total], np.float32)))
        return [pb_utils.InferenceResponse(output_tensors=outputs)]


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            if llm.first(llm.read(request, "stop"), False):
                if not request.request_id():
                    llm.fail(sender, "A request id must be provided for request cancellation")
                else:
                    llm.fail(sender, "Request cancelled by client", pb_utils.TritonError.CANCELLED)
                continue
            try:
                generation = Generation(request)
            except ValueError as error:
                llm.fail(sender, f"Error generating request: {error}")
                continue
            llm.serve(
                sender,
                generation.steps,
                generation.respond,
                generation.streaming,
                llm.explodes(generation.prompt),
            )
