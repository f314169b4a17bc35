"""The LLM adapters and the assembly of answers, without a server: which adapter a model's
tensors pick, what each sends, and how responses become choices, chunks and usage
(the server-side behaviour is in tests/integration/test_llm.py)."""

from __future__ import annotations

import json
import math
import threading
from typing import Any, cast

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk import ops
from triton_sdk._llm import LLMCall
from triton_sdk.llm import VLLM, SamplingValue, TensorRTLLM, TensorRTLLMAPI, adapter_for, custom
from triton_sdk.testing import MockTransport

from .._reader import StreamReader


def tensor(name: str, datatype: str = "BYTES", optional: bool = True) -> ts.TensorSpec:
    return ts.TensorSpec(name=name, datatype=datatype, shape=(1,), optional=optional)


def model(name: str, inputs: dict[str, str], outputs: dict[str, str]) -> ts.ModelSpec:
    return ts.ModelSpec(
        name=name,
        inputs={n: tensor(n, t, optional=n != "text_input") for n, t in inputs.items()},
        outputs={n: tensor(n, t) for n, t in outputs.items()},
    )


VLLM_SPEC = model(
    "vllm",
    {
        "text_input": "BYTES",
        "stream": "BOOL",
        "sampling_parameters": "BYTES",
        "exclude_input_in_output": "BOOL",
        "return_finish_reason": "BOOL",
        "return_num_input_tokens": "BOOL",
        "return_num_output_tokens": "BOOL",
    },
    {"text_output": "BYTES", "finish_reason": "BYTES", "num_input_tokens": "UINT32"},
)
OLD_VLLM = model(
    "old_vllm",
    {"text_input": "BYTES", "stream": "BOOL", "sampling_parameters": "BYTES"},
    {"text_output": "BYTES"},
)
# TensorRT-LLM before 0.17: random_seed, min_length, no token-count outputs.
OLD_TRTLLM = model(
    "ensemble",
    {
        "text_input": "BYTES",
        "max_tokens": "INT32",
        "stop_words": "BYTES",
        "random_seed": "UINT64",
        "min_length": "INT32",
        "return_log_probs": "BOOL",
        "stream": "BOOL",
        "end_id": "INT32",
    },
    {"text_output": "BYTES", "output_log_probs": "FP32", "cum_log_probs": "FP32"},
)
LLMAPI = model(
    "llmapi",
    {
        "text_input": "BYTES",
        "streaming": "BOOL",
        "sampling_param_max_tokens": "INT32",
        "sampling_param_stop": "BYTES",
        "sampling_param_exclude_input_from_output": "BOOL",
        "return_finish_reason": "BOOL",
    },
    {"text_output": "BYTES", "finish_reason": "BYTES"},
)
# The shape of the repository's generator: text_input and max_tokens, but no TensorRT-LLM.
WORDS = model("words", {"text_input": "BYTES", "max_tokens": "INT32"}, {"text_output": "BYTES"})


@pytest.mark.parametrize(
    ("spec", "kind"),
    [(VLLM_SPEC, VLLM), (OLD_VLLM, VLLM), (OLD_TRTLLM, TensorRTLLM), (LLMAPI, TensorRTLLMAPI)],
)
def test_the_adapter_comes_from_the_tensors(spec: ts.ModelSpec, kind: type) -> None:
    assert type(adapter_for(spec)) is kind


def test_a_plain_text_model_gets_the_custom_adapter() -> None:
    adapter = adapter_for(WORDS)
    assert adapter.family == "custom"
    assert adapter.fields("hi", {"max_tokens": 2}, False) == {"text_input": "hi", "max_tokens": 2}


def test_vllm_options_travel_as_sampling_parameters() -> None:
    fields = VLLM(VLLM_SPEC).fields("hi", {"max_tokens": 4, "stop": "\n", "n": 2}, True)
    assert json.loads(str(fields.pop("sampling_parameters"))) == {
        "max_tokens": 4,
        "n": 2,
        "stop": ["\n"],
    }
    assert fields == {
        "text_input": "hi",
        "stream": True,
        "exclude_input_in_output": True,
        "return_finish_reason": True,
        "return_num_input_tokens": True,
        "return_num_output_tokens": True,
    }


def test_older_tensorrt_llm_names_and_log_prob_counting() -> None:
    adapter = TensorRTLLM(OLD_TRTLLM)
    fields = adapter.fields("hi", {"max_tokens": 3, "seed": 7, "min_tokens": 1, "stop": "x"}, False)
    assert fields == {
        "text_input": "hi",
        "max_tokens": 3,
        "random_seed": 7,
        "min_length": 1,
        "stop_words": ["x"],
        "stream": False,
        "return_log_probs": True,
    }
    call = LLMCall.plan(adapter, "hi", {"max_tokens": 3}, stream=False, prefix="cmpl")
    # 3 tokens by their log-probabilities: max_tokens used up.
    answer = call.completion([{"text_output": "hi a b c", "output_log_probs": [-0.5] * 3}])
    assert answer.text == " a b c"  # no exclude_input_in_output: the echo is cut off
    assert answer.finish_reason == "length"
    assert answer.usage == ts.Usage(0, 3)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"stop": "x", "stop_words": ["y"]}, "stop and stop_words both set the input 'stop_words'"),
        ({"stop_words": ["y"], "stop": "x"}, "stop_words and stop both set the input 'stop_words'"),
        ({"seed": 1, "random_seed": 2}, "seed and random_seed both set the input 'random_seed'"),
        ({"min_tokens": 1, "min_length": 2}, "min_tokens and min_length both set the input"),
    ],
)
def test_two_options_for_one_tensorrt_llm_input_are_refused(
    options: dict[str, SamplingValue], said: str
) -> None:
    # One overwrote the other: stop=" a" with stop_words=[" b"] stopped at " b" only.
    with pytest.raises(ts.InvalidInputError, match=said):
        LLMCall.plan(
            TensorRTLLM(OLD_TRTLLM), "hi", {"max_tokens": 3, **options}, stream=False, prefix="c"
        )


def test_numpy_option_values_are_their_python_values() -> None:
    # vLLM's sampling parameters failed to serialize an np.int64 (a raw TypeError), and
    # TensorRT-LLM's finish reason read max_tokens=np.int64(3) as no limit ("stop"). A
    # 0-d array is its value too.
    call = LLMCall.plan(
        VLLM(VLLM_SPEC),
        "hi",
        {"max_tokens": np.int64(4), "temperature": np.array(0.5, np.float32)},  # type: ignore[dict-item]
        stream=False,
        prefix="cmpl",
    )
    sampling = json.loads(str(call.fields["sampling_parameters"]))
    assert sampling == {"max_tokens": 4, "temperature": 0.5}
    adapter = TensorRTLLM(OLD_TRTLLM)
    call = LLMCall.plan(adapter, "hi", {"max_tokens": np.int64(3)}, stream=False, prefix="c")  # type: ignore[dict-item]
    answer = call.completion([{"text_output": "hi a b c", "output_log_probs": [-0.5] * 3}])
    assert answer.finish_reason == "length"


def test_an_option_given_as_none_is_left_out() -> None:
    # It went as JSON null ({"temperature": null}), which no option takes.
    options: dict[str, SamplingValue] = {"temperature": None, "max_tokens": 3, "n": None}
    call = LLMCall.plan(VLLM(VLLM_SPEC), "hi", options, stream=False, prefix="c")
    assert json.loads(str(call.fields["sampling_parameters"])) == {"max_tokens": 3}
    call = LLMCall.plan(TensorRTLLM(OLD_TRTLLM), "hi", options, stream=False, prefix="c")
    assert "temperature" not in call.fields


def test_one_limit_given_and_the_other_none_is_the_one_given() -> None:
    # "max_tokens and max_completion_tokens are the same limit: give one"
    options: dict[str, SamplingValue] = {"max_tokens": 3, "max_completion_tokens": None}
    call = LLMCall.plan(VLLM(VLLM_SPEC), "hi", options, stream=False, prefix="c")
    assert json.loads(str(call.fields["sampling_parameters"])) == {"max_tokens": 3}


def test_a_backends_own_option_may_be_a_mapping() -> None:
    options: dict[str, SamplingValue] = {"logit_bias": {"50256": -100.0}}
    call = LLMCall.plan(VLLM(VLLM_SPEC), "hi", options, stream=False, prefix="c")
    assert json.loads(str(call.fields["sampling_parameters"])) == {"logit_bias": {"50256": -100.0}}


@pytest.mark.parametrize("stop", [5, [1, 2], 3.5])
def test_a_stop_that_is_no_str_nor_list_of_str_is_refused(stop: object) -> None:
    # stop=5 raised a raw TypeError ("'int' object is not iterable").
    with pytest.raises(ts.InvalidInputError, match="stop is a str or a list of str"):
        LLMCall.plan(VLLM(VLLM_SPEC), "hi", {"stop": stop}, stream=False, prefix="c")  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("name", "value", "kind"),
    [
        ("max_tokens", "2", "an integer"),
        ("max_tokens", 2.0, "an integer"),
        ("max_completion_tokens", True, "an integer"),
        ("seed", 1.5, "an integer"),
        ("top_k", "5", "an integer"),
        ("temperature", "x", "a number"),
        ("temperature", True, "a number"),
        ("top_p", [0.5], "a number"),
    ],
)
def test_options_of_the_wrong_type_are_refused_before_sending(
    name: str, value: object, kind: str
) -> None:
    # They went to the server as given: vLLM read temperature="x" and max_tokens="2".
    with pytest.raises(ts.InvalidInputError, match=f"{name} is {kind}, got"):
        LLMCall.plan(VLLM(VLLM_SPEC), "hi", {name: value}, stream=False, prefix="c")  # type: ignore[dict-item]
    # The OpenAI route checks them as well: nothing listens on port 9.
    with (
        ts.Client("http://127.0.0.1:9", openai_url="http://127.0.0.1:9/v1", route="openai") as c,
        pytest.raises(ts.InvalidInputError, match=f"{name} is {kind}, got"),
    ):
        c.completions.create(model="m", prompt="hi", **{name: value})  # type: ignore[arg-type]


def test_max_completion_tokens_is_max_tokens_on_the_native_route() -> None:
    call = LLMCall.plan(
        VLLM(VLLM_SPEC), "hi", {"max_completion_tokens": 4}, stream=False, prefix="c"
    )
    assert json.loads(str(call.fields["sampling_parameters"])) == {"max_tokens": 4}
    call = LLMCall.plan(
        TensorRTLLM(OLD_TRTLLM), "hi", {"max_completion_tokens": 3}, stream=False, prefix="c"
    )
    assert call.fields["max_tokens"] == 3
    both = {"max_tokens": 4, "max_completion_tokens": 4}
    with pytest.raises(ts.InvalidInputError, match="give one"):
        LLMCall.plan(VLLM(VLLM_SPEC), "hi", both, stream=False, prefix="c")


def test_vllm_options_that_are_not_json_are_refused_by_name() -> None:
    # json.dumps raised a raw TypeError ("Object of type set is not JSON serializable").
    for value in ({1, 2}, range(3)):
        with pytest.raises(ts.InvalidInputError, match="stop_token_ids cannot be sent as JSON"):
            LLMCall.plan(VLLM(VLLM_SPEC), "hi", {"stop_token_ids": value}, stream=False, prefix="c")
    with pytest.raises(ts.InvalidInputError, match="temperature cannot be sent as JSON"):
        LLMCall.plan(VLLM(VLLM_SPEC), "hi", {"temperature": math.nan}, stream=False, prefix="c")
    # Token ids in a numpy array are a list.
    ids = np.array([1, 2])
    call = LLMCall.plan(VLLM(VLLM_SPEC), "hi", {"stop_token_ids": ids}, stream=False, prefix="c")
    assert json.loads(str(call.fields["sampling_parameters"])) == {"stop_token_ids": [1, 2]}


def test_max_completion_tokens_is_refused_by_its_own_name() -> None:
    # On a model that takes neither, the error named 'max_tokens', which was not given.
    spec = model("plain", {"text_input": "BYTES"}, {"text_output": "BYTES"})
    adapter = adapter_for(spec, custom(prompt="text_input", text="text_output"))
    assert "max_tokens" not in adapter.options
    with pytest.raises(ts.InvalidInputError, match="does not take 'max_completion_tokens'"):
        LLMCall.plan(adapter, "hi", {"max_completion_tokens": 4}, stream=False, prefix="c")


def test_an_old_vllm_echo_is_cut_off() -> None:
    call = LLMCall.plan(VLLM(OLD_VLLM), "Q: hi", {}, stream=False, prefix="cmpl")
    answer = call.completion([{"text_output": "Q: hi A: hello"}])
    assert answer.text == " A: hello"
    assert answer.finish_reason == "stop"
    assert answer.usage is None  # nothing was counted


def stream(call: LLMCall, events: list[dict[str, Any]], chat: bool = True) -> list[Any]:
    assembler = call.chat_chunks() if chat else call.completion_chunks()
    chunks = [chunk for event in events for chunk in assembler.feed(event)]
    return chunks + assembler.finish()


def test_a_cumulative_stream_becomes_deltas() -> None:
    call = LLMCall.plan(TensorRTLLMAPI(LLMAPI), "p", {}, stream=True, prefix="chatcmpl")
    events = [
        {"text_output": "Hel", "finish_reason": "None"},
        {"text_output": "Hello", "finish_reason": "None"},
        {"text_output": "Hello!", "finish_reason": "stop"},
    ]
    chunks = stream(call, events)
    assert [chunk.text for chunk in chunks] == ["", "Hel", "lo", "!"]
    # A half-decoded character (U+FFFD until its bytes are complete) is held back.
    call = LLMCall.plan(TensorRTLLMAPI(LLMAPI), "p", {}, stream=True, prefix="cmpl")
    events = [
        {"text_output": "caf", "finish_reason": "None"},
        {"text_output": "caf\ufffd", "finish_reason": "None"},
        {"text_output": "café!", "finish_reason": "stop"},
    ]
    assert "".join(chunk.text for chunk in stream(call, events, chat=False)) == "café!"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [chunk.finish_reason for chunk in chunks] == [None, None, None, "stop"]


def test_text_rewritten_after_it_was_sent_does_not_stop_the_stream() -> None:
    # A rewrite behind what was sent ("Hello " became "Hello.") made every later delta
    # empty: " World!" was lost. What was sent stays; what lies past it still comes.
    call = LLMCall.plan(TensorRTLLMAPI(LLMAPI), "p", {}, stream=True, prefix="cmpl")
    events = [
        {"text_output": "Hello", "finish_reason": "None"},
        {"text_output": "Hello ", "finish_reason": "None"},
        {"text_output": "Hello.", "finish_reason": "None"},
        {"text_output": "Hello", "finish_reason": "None"},  # (shorter for a moment)
        {"text_output": "Hello. World", "finish_reason": "None"},
        {"text_output": "Hello. World!", "finish_reason": "stop"},
    ]
    texts = [chunk.text for chunk in stream(call, events, chat=False)]
    assert texts == ["Hello", " ", " World", "!"]


def test_a_stream_without_finish_reasons_gets_one_per_choice_and_usage_last() -> None:
    adapter = TensorRTLLM(OLD_TRTLLM)
    call = LLMCall.plan(adapter, "p", {"max_tokens": 2}, stream=True, prefix="cmpl")
    events = [
        {"text_output": "a", "output_log_probs": -0.5},
        {"text_output": " b", "output_log_probs": -0.5},
    ]
    chunks = stream(call, events, chat=False)
    assert [chunk.text for chunk in chunks] == ["a", " b", "", ""]
    assert [chunk.finish_reason for chunk in chunks] == [None, None, "length", None]
    assert chunks[-1].usage == ts.Usage(0, 2)
    assert chunks[-1].choices == ()


def test_sequences_in_responses_of_their_own_become_choices() -> None:
    spec = model(
        "trt",
        {
            "text_input": "BYTES",
            "max_tokens": "INT32",
            "stop_words": "BYTES",
            "num_return_sequences": "INT32",
        },
        {"text_output": "BYTES", "sequence_index": "INT32", "num_output_tokens": "INT32"},
    )
    call = LLMCall.plan(
        TensorRTLLM(spec), "p", {"max_tokens": 8, "n": 2}, stream=False, prefix="cmpl"
    )
    assert call.fields["num_return_sequences"] == 2
    answer = call.completion(
        [
            {"text_output": "x y", "sequence_index": 1, "num_output_tokens": 2},
            {"text_output": "a b c", "sequence_index": 0, "num_output_tokens": 3},
        ]
    )
    assert [choice.text for choice in answer.choices] == ["a b c", "x y"]
    assert answer.usage == ts.Usage(0, 5)


def test_custom_refuses_n_and_unknown_options() -> None:
    adapter = adapter_for(
        WORDS, custom(prompt="text_input", text="text_output", parameters=["temperature"])
    )
    with pytest.raises(ts.UnsupportedError, match="n=3"):
        adapter.check({"n": 3})
    with pytest.raises(ts.InvalidInputError, match=r"'top_p'.*max_tokens, n, temperature") as e:
        adapter.check({"top_p": 0.5})
    assert "custom(..., parameters=[...])" in str(e.value)  # where to name more
    assert adapter.fields("hi", {"temperature": 0.5, "max_tokens": 2}, False) == {
        "text_input": "hi",
        "temperature": 0.5,
        "max_tokens": 2,
    }


def test_custom_names_what_the_model_lacks() -> None:
    with pytest.raises(ts.InvalidInputError, match=r"no input 'PROMPT'.*text_input, max_tokens"):
        adapter_for(WORDS, custom(prompt="PROMPT", text="text_output"))


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {"prompt": "max_tokens", "text": "text_output"},
            "input 'max_tokens' is INT32, so it cannot be the prompt (BYTES input is needed)",
        ),
        (
            {"prompt": "text_input", "text": "count"},
            "output 'count' is INT32, so it cannot be the text (BYTES output is needed)",
        ),
        (
            {"prompt": "text_input", "text": "text_output", "stream": "max_tokens"},
            "input 'max_tokens' is INT32, so it cannot be the stream (BOOL input is needed)",
        ),
        (
            {"prompt": "text_input", "text": "text_output", "finish_reason": "count"},
            "output 'count' is INT32, so it cannot be the finish_reason",
        ),
        (
            {"prompt": "text_input", "text": "text_output", "finish_reason": "why"},
            "no output 'why' for the finish_reason; its outputs are text_output, count, reason",
        ),
        (
            {"prompt": "text_input", "text": "text_output", "completion_tokens": "reason"},
            "output 'reason' is BYTES, so it cannot be the completion_tokens (an integer output",
        ),
        (
            {"prompt": "text_input", "text": "text_output", "prompt_tokens": "tokens"},
            "no output 'tokens' for the prompt_tokens",
        ),
    ],
)
def test_custom_refuses_tensors_that_cannot_play_their_role(
    schema: dict[str, str], message: str
) -> None:
    spec = model(
        "mine",
        {"text_input": "BYTES", "max_tokens": "INT32"},
        {"text_output": "BYTES", "count": "INT32", "reason": "BYTES"},
    )
    with pytest.raises(ts.InvalidInputError) as caught:
        adapter_for(spec, custom(**schema))
    assert message in str(caught.value)


def test_results_round_trip_through_openai_json() -> None:
    call = LLMCall.plan(VLLM(VLLM_SPEC), "p", {"n": 2}, stream=False, prefix="chatcmpl")
    answer = call.chat_completion(
        [
            {
                "text_output": ["one", "two"],
                "finish_reason": ["stop", "length"],
                "num_input_tokens": 1,
                "num_output_tokens": [1, 1],
            }
        ]
    )
    assert ts.ChatCompletion.from_openai_dict(answer.to_openai_dict()) == answer
    assert answer.to_openai_dict()["usage"] == {
        "prompt_tokens": 1,
        "completion_tokens": 2,
        "total_tokens": 3,
    }


def test_a_custom_echo_is_cut_only_while_it_matches() -> None:
    schema = custom(prompt="text_input", text="text_output", echoes_prompt=True)
    call = LLMCall.plan(adapter_for(WORDS, schema), "Hi you", {}, stream=True, prefix="cmpl")
    events = [{"text_output": "Hi "}, {"text_output": "you, friend"}]
    assert "".join(chunk.text for chunk in stream(call, events, chat=False)) == ", friend"
    call = LLMCall.plan(adapter_for(WORDS, schema), "Hello world", {}, stream=True, prefix="cmpl")
    events = [{"text_output": "hello world, friend"}]
    chunks = stream(call, events, chat=False)
    assert "".join(chunk.text for chunk in chunks) == "hello world, friend"
    assert call.completion(events).text == "hello world, friend"


def test_a_custom_text_of_several_elements_is_one_choice_streamed_or_not() -> None:
    # It became one choice per element whole, and streamed the elements past the first
    # were dropped.
    schema = custom(prompt="text_input", text="text_output")
    events = [{"text_output": ["Hel", "lo"]}, {"text_output": [" there"]}]
    call = LLMCall.plan(adapter_for(WORDS, schema), "hi", {}, stream=False, prefix="cmpl")
    answer = call.completion(events)
    assert [(c.index, c.text) for c in answer.choices] == [(0, "Hello there")]
    call = LLMCall.plan(adapter_for(WORDS, schema), "hi", {}, stream=True, prefix="cmpl")
    assert "".join(chunk.text for chunk in stream(call, events, chat=False)) == "Hello there"


def test_beams_are_refused() -> None:
    spec = model(
        "trt",
        {"text_input": "BYTES", "max_tokens": "INT32", "beam_width": "INT32", "end_id": "INT32"},
        {"text_output": "BYTES"},
    )
    with pytest.raises(ts.UnsupportedError, match="beam_width=2"):
        TensorRTLLM(spec).check({"max_tokens": 4, "beam_width": 2})


# Through the clients: a stream read to its end, and one closed from another thread.

EVENTS = [
    {"text_output": "a", "output_log_probs": -0.5},
    {"text_output": " b", "output_log_probs": -0.5},
]


def answer_events(op: Any, ctx: ts.CallContext) -> object:
    assert isinstance(op, ops.GenerateStream)
    return EVENTS


def assert_finished(chunks: list[ts.CompletionChunk]) -> None:
    # The model gives no finish reason or counts: the stream's end infers them.
    assert [chunk.text for chunk in chunks] == ["a", " b", "", ""]
    assert [chunk.finish_reason for chunk in chunks] == [None, None, "length", None]
    assert chunks[-1].usage == ts.Usage(0, 2)


def test_a_stream_read_to_its_end_gets_finish_reasons_and_usage() -> None:
    mock = MockTransport(answer_events, models=[OLD_TRTLLM])
    with ts.Client("grpc://test", transport=mock) as client:
        assert_finished(list(client.model("ensemble").complete_stream("p", max_tokens=2)))


async def test_an_async_stream_read_to_its_end_gets_finish_reasons_and_usage() -> None:
    mock = MockTransport(answer_events, models=[OLD_TRTLLM])
    async with ts.AsyncClient("grpc://test", transport=mock) as client:
        model = await client.model("ensemble")
        assert_finished([chunk async for chunk in model.complete_stream("p", max_tokens=2)])


@pytest.mark.parametrize("call", ["complete", "chat"])
def test_a_generation_on_a_model_that_is_not_decoupled_is_never_retried(call: str) -> None:
    # It ran under the client's retry policy: a broken connection after the request
    # went out had it run (and sample) twice, where streams and the OpenAI route never do.
    sent: list[object] = []

    def flaky(op: Any, ctx: ts.CallContext) -> object:
        sent.append(op)
        if len(sent) == 1:
            raise ts.TritonConnectionError("reset", retryable=True, may_have_run=True)
        return {"text_output": "x"}

    policy = ts.RetryPolicy(max_attempts=3, initial_backoff=0.001, jitter=False)
    mock = MockTransport(flaky, models=[WORDS])
    with ts.Client("grpc://test", transport=mock, retry=policy) as client:
        model = client.model("words")
        messages = [{"role": "user", "content": "hi"}]
        template = "{{ messages[0].content }}"
        generation = (
            (lambda: model.chat(messages, chat_template=template))
            if call == "chat"
            else (lambda: model.complete("hi"))
        )
        with pytest.raises(ts.TritonConnectionError, match="reset"):
            generation()
    assert len(sent) == 1


def test_a_stream_closed_from_another_thread_gets_none_made_up() -> None:
    release = threading.Event()

    def slow(op: Any, ctx: ts.CallContext) -> object:
        def events() -> Any:
            yield EVENTS[0]
            release.wait(10)
            yield EVENTS[1]

        return events()

    with ts.Client("grpc://test", transport=MockTransport(slow, models=[OLD_TRTLLM])) as client:
        stream = client.model("ensemble").complete_stream("p", max_tokens=2)
        reader = StreamReader(stream)
        reader.wait_until_waiting()
        try:
            stream.close()
        finally:
            release.set()
        reader.join(5)
    assert reader.outcome == ["ended"]
    chunks = cast("list[ts.CompletionChunk]", reader.seen)
    assert chunks
    assert all(chunk.finish_reason is None and chunk.usage is None for chunk in chunks)
