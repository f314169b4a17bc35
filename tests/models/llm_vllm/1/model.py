"""Answers as the vLLM backend does, with the fake LLM of ../_fake_llm.

sampling_parameters (a JSON object; the request's parameters when absent) takes vLLM's
SamplingParams fields; n, max_tokens (default 16) and stop act, others are accepted and
ignored, unknown ones are an error. Non-streaming: one response, the prompt prepended
unless exclude_input_in_output. Streaming: one response per token step with the deltas,
finish_reason "None" until a choice ends.
"""

import json
import sys
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_fake_llm"))
import fake_llm as llm

# vLLM's SamplingParams fields (vllm/sampling_params.py, 2026), and the backend's lora_name
SAMPLING_FIELDS = frozenset(
    """n presence_penalty frequency_penalty repetition_penalty temperature top_p top_k
    min_p seed stop stop_token_ids ignore_eos max_tokens min_tokens logprobs
    prompt_logprobs prompt_logprob_token_ids prompt_logprob_start logprob_token_ids
    flat_logprobs detokenize skip_special_tokens spaces_between_special_tokens
    include_stop_str_in_output output_kind stream_interval skip_clone
    output_text_buffer_length structured_outputs logit_bias allowed_token_ids extra_args
    bad_words skip_reading_prefix_cache thinking_token_budget repetition_detection
    routed_experts_prompt_start trace_decode_token_ids lora_name""".split()  # noqa: SIM905
)
RETURN_FLAGS = (
    "return_finish_reason",
    "return_cumulative_logprob",
    "return_logprobs",
    "return_num_input_tokens",
    "return_num_output_tokens",
)


def sampling_parameters(request) -> dict:
    tensor = llm.read(request, "sampling_parameters")
    raw = llm.first(tensor) if tensor is not None else request.parameters()
    try:
        params = json.loads(raw or "{}")
    except json.JSONDecodeError as error:
        raise ValueError(f"sampling_parameters is not valid JSON: {error}") from None
    if not isinstance(params, dict):
        raise ValueError("sampling_parameters must be a JSON object")
    unknown = sorted(set(params) - SAMPLING_FIELDS)
    if unknown:
        raise ValueError(f"unknown sampling parameter(s): {', '.join(unknown)}")
    if params.get("lora_name") is not None:
        raise ValueError("LoRA feature is not enabled.")
    return params


class Generation:
    """One request: its prompt, choices and the outputs it asked for."""

    def __init__(self, request) -> None:
        self.prompt = llm.first(llm.read(request, "text_input"))
        self.stream = bool(llm.first(llm.read(request, "stream"), False))
        exclude = llm.first(llm.read(request, "exclude_input_in_output"))
        if self.stream and exclude is False:
            raise ValueError("When streaming, `exclude_input_in_output` = False is not allowed.")
        self.echo = not self.stream and not exclude
        params = sampling_parameters(request)
        max_tokens = params.get("max_tokens", 16)
        stop = params.get("stop") or []
        self.choices = [
            llm.complete(
                self.prompt,
                index,
                None if max_tokens is None else int(max_tokens),
                [stop] if isinstance(stop, str) else stop,
            )
            for index in range(int(params.get("n", 1)))
        ]
        if not self.choices:
            raise ValueError("n must be at least 1")
        self.steps = max(len(choice.pieces) for choice in self.choices) or 1
        self.logprobs = params.get("logprobs")
        self.flags = {
            name: bool(llm.first(llm.read(request, name), False)) for name in RETURN_FLAGS
        }

    def respond(self, step):
        """Step ``step``'s response (the deltas), or the whole completion's (None)."""
        start = 0 if step is None else step
        parts = [c.pieces if step is None else c.pieces[step : step + 1] for c in self.choices]
        done = [step is None or step >= len(c.pieces) - 1 for c in self.choices]
        prefix = self.prompt if self.echo else ""
        outputs = [llm.texts("text_output", [prefix + "".join(part) for part in parts])]
        if self.flags["return_finish_reason"]:
            reasons = [
                c.finish_reason if end else "None"
                for c, end in zip(self.choices, done, strict=True)
            ]
            outputs.append(llm.texts("finish_reason", reasons))
        if self.flags["return_cumulative_logprob"]:
            totals = [
                llm.LOGPROB * min(start + len(part), len(c.pieces))
                for c, part in zip(self.choices, parts, strict=True)
            ]
            outputs.append(
                pb_utils.Tensor("cumulative_logprob", np.array(totals, dtype=np.float32))
            )
        if self.flags["return_logprobs"]:
            outputs.append(
                llm.texts(
                    "logprobs", [self.logprobs_json(i, start, p) for i, p in enumerate(parts)]
                )
            )
        if self.flags["return_num_input_tokens"]:
            count = np.array([llm.prompt_tokens(self.prompt)], dtype=np.uint32)
            outputs.append(pb_utils.Tensor("num_input_tokens", count))
        if self.flags["return_num_output_tokens"]:
            counts = np.array([len(part) for part in parts], dtype=np.uint32)
            outputs.append(pb_utils.Tensor("num_output_tokens", counts))
        return [pb_utils.InferenceResponse(output_tensors=outputs)]

    def logprobs_json(self, choice: int, start: int, part: list) -> str:
        """vLLM's logprobs of this response's tokens, as JSON ("null" unless asked)."""
        if self.logprobs is None:
            return "null"
        return json.dumps(
            [
                {
                    str(llm.token_id(start + k, choice)): {
                        "logprob": llm.LOGPROB,
                        "rank": 1,
                        "decoded_token": piece,
                    }
                }
                for k, piece in enumerate(part)
            ]
        )


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                generation = Generation(request)
            except (ValueError, TypeError) as error:
                llm.fail(sender, f"Error generating stream: {error}")
                continue
            llm.serve(
                sender,
                generation.steps,
                generation.respond,
                generation.stream,
                llm.explodes(generation.prompt),
            )
