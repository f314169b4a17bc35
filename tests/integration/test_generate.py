"""The generate extension against the real server: JSON fields in, JSON fields out, one
response or a stream of them; extra fields as parameters; errors."""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import numpy as np
import pytest

import triton_sdk as ts
from triton_sdk.local import LocalServer

from .conftest import inference_count


def test_generate_one_token(client: Any) -> None:
    result = client.model("generator").generate(text_input="hi there", max_tokens=1)
    assert result == {"text_output": "hi ", "index": 0}


def test_generate_takes_a_mapping_too(client: Any) -> None:
    model = client.model("generator")
    assert model.generate({"text_input": "hello world", "max_tokens": 1}) == {
        "text_output": "hello ",
        "index": 0,
    }


def test_none_for_an_optional_field_leaves_it_out_on_both_protocols(client: Any) -> None:
    # HTTP sent "DELAY_MS": null, which Triton refused; gRPC left it out.
    model = client.model("repeat")  # DELAY_MS is optional
    assert model.generate({"IN": [1], "DELAY_MS": None}) == {"OUT": 1, "IDX": 0}
    assert list(model.generate_stream({"IN": [1], "DELAY_MS": None})) == [{"OUT": 1, "IDX": 0}]


def test_more_than_one_response_is_an_inference_error(client: Any, protocol: str) -> None:
    model = client.model("generator")
    with pytest.raises(ts.InferenceError) as caught:
        model.generate(text_input="hi there", max_tokens=2)
    assert caught.value.model == "generator"
    if protocol == "http":
        # Triton answers 200 with {"error": ...} in the body.
        assert caught.value.status == 200
    assert "generate_stream" in str(caught.value) or "generate stream" in str(caught.value)


def test_generate_stream_yields_each_chunk_in_order(client: Any) -> None:
    chunks = list(client.model("generator").generate_stream(text_input="to be or", max_tokens=4))
    assert chunks == [
        {"text_output": "to ", "index": 0},
        {"text_output": "be ", "index": 1},
        {"text_output": "or ", "index": 2},
        {"text_output": "to ", "index": 3},
    ]


def test_generate_stream_default_token_count(client: Any) -> None:
    chunks = list(client.model("generator").generate_stream(text_input="a"))
    assert [chunk["index"] for chunk in chunks] == [0, 1, 2, 3]
    assert {chunk["text_output"] for chunk in chunks} == {"a "}


def test_generate_stream_of_no_responses(client: Any) -> None:
    assert list(client.model("generator").generate_stream(text_input="x", max_tokens=0)) == []


def test_generate_stream_arrives_chunk_by_chunk(client: Any) -> None:
    # `repeat` waits 600 ms after each response: the stream takes ~1.8 s after its first chunk.
    started = time.monotonic()
    arrivals = []
    chunks = []
    for chunk in client.model("repeat").generate_stream(IN=[1, 2, 3], DELAY_MS=600):
        arrivals.append(time.monotonic() - started)
        chunks.append(chunk)
    ended = time.monotonic() - started
    assert chunks == [{"OUT": 1, "IDX": 0}, {"OUT": 2, "IDX": 1}, {"OUT": 3, "IDX": 2}]
    # The first chunk was handed over well before the stream ended.
    assert ended - arrivals[0] > 0.9
    assert arrivals[1] - arrivals[0] > 0.3


def test_leaving_a_generate_stream_early(client: Any) -> None:
    model = client.model("repeat")
    started = time.monotonic()
    seen = []
    for chunk in model.generate_stream(IN=list(range(50)), DELAY_MS=50):
        seen.append(chunk)
        if len(seen) == 2:
            break
    assert seen == [{"OUT": 0, "IDX": 0}, {"OUT": 1, "IDX": 1}]
    assert time.monotonic() - started < 1.75  # the whole stream takes 2.5 s
    assert list(model.generate_stream(IN=[9])) == [{"OUT": 9, "IDX": 0}]


def test_extra_fields_become_parameters(client: Any) -> None:
    model = client.model("all_dtypes")
    result = model.generate(IN_INT32=[1, 2], foo=3)
    assert json.loads(result["PARAMETERS"]) == {"foo": 3}
    assert result["OUT_INT32"] == [1, 2]
    assert set(result) == {"OUT_INT32", "PARAMETERS"}


def test_parameters_argument_and_extra_fields_together(client: Any) -> None:
    model = client.model("all_dtypes")
    result = model.generate(
        IN_INT32=[7], mode="fast", parameters={"temperature": 0.5, "greedy": True}
    )
    assert json.loads(result["PARAMETERS"]) == {"mode": "fast", "temperature": 0.5, "greedy": True}
    # A one-element output is its plain value.
    assert result["OUT_INT32"] == 7


def test_numpy_scalars_and_tuples_are_sent_as_their_values(client: Any) -> None:
    # Over HTTP too: fields and parameters checked as gRPC checks them, then sent as JSON.
    model = client.model("all_dtypes")
    result = model.generate(
        IN_INT32=(7, 8),
        temperature=np.float32(0.5),
        parameters={"top_k": np.int64(3), "greedy": np.bool_(True)},
    )
    assert result["OUT_INT32"] == [7, 8]
    assert json.loads(result["PARAMETERS"]) == {"temperature": 0.5, "top_k": 3, "greedy": True}
    (chunk,) = list(model.generate_stream(IN_INT32=np.int32(4), top_k=np.int16(2)))
    assert chunk == {"OUT_INT32": 4, "PARAMETERS": '{"top_k":2}'}


def test_extra_fields_in_generate_stream(client: Any) -> None:
    (chunk,) = list(client.model("all_dtypes").generate_stream(IN_INT32=[4, 5], top_k=2))
    assert json.loads(chunk["PARAMETERS"]) == {"top_k": 2}
    assert chunk["OUT_INT32"] == [4, 5]


def test_generate_on_a_model_without_batch_axis(client: Any) -> None:
    model = client.model("add_sub")
    result = model.generate(INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1])
    assert result == {"OUTPUT0": [2.0, 3.0, 4.0, 5.0], "OUTPUT1": [0.0, 1.0, 2.0, 3.0]}
    assert list(model.generate_stream(INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1])) == [result]


def test_generate_on_a_batched_model_is_one_sample(client: Any) -> None:
    model = client.model("text_embed")
    result = model.generate(TEXT="hello")
    assert set(result) == {"OUTPUT"}
    assert isinstance(result["OUTPUT"], list)
    assert len(result["OUTPUT"]) == 768
    expected = model.infer_sample(TEXT="hello")["OUTPUT"]
    assert np.allclose(np.array(result["OUTPUT"], dtype=np.float32), expected, atol=1e-6)


def test_a_model_error_arrives_as_inference_error(client: Any) -> None:
    # `zeros` fails inside the model on a negative count (numpy refuses the shape).
    model = client.model("zeros")
    with pytest.raises(ts.InferenceError, match="negative dimensions") as caught:
        model.generate(COUNT=-1)
    assert caught.value.model == "zeros"
    assert type(caught.value).__module__.startswith("triton_sdk")


def test_a_model_error_in_generate_stream(client: Any) -> None:
    model = client.model("zeros")
    with pytest.raises(ts.InferenceError, match="negative dimensions") as caught:
        list(model.generate_stream(COUNT=-1))
    assert caught.value.model == "zeros"
    # The error's text is the server's message, not the event-stream framing around it.
    message = str(caught.value)
    assert message.startswith("Failed to process"), message
    assert not message.startswith("data:")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("many", "'max_tokens' is INT32 (int32): values of dtype <U4 cannot be cast"),
        (1.5, "'max_tokens' is INT32 (int32): values of dtype float64 cannot be cast"),
        (2**31, f"'max_tokens' is INT32: value {2**31} is outside"),
        ([1, 2], "'max_tokens' expects shape [1], got (2,)"),
    ],
)
def test_a_field_the_input_cannot_take_is_refused_before_sending(
    client: Any, server: LocalServer, value: object, message: str
) -> None:
    # As for infer, on both protocols: HTTP sent the fields as they were, and the server
    # turned them down (or, for some, took them as something else).
    model = client.model("generator")
    before = inference_count(server, "generator")
    with pytest.raises(ts.InvalidInputError, match=re.escape(message)):
        model.generate(text_input="hi", max_tokens=value)
    with pytest.raises(ts.InvalidInputError, match=re.escape(message)):
        model.generate_stream(text_input="hi", max_tokens=value)  # at the call, as stream
    assert inference_count(server, "generator") == before


def test_fields_the_protocols_would_send_apart_are_refused_on_both(
    client: Any, server: LocalServer, protocol: str
) -> None:
    # HTTP sent k twice (the model got both values), read id as the request's id (the
    # server failed to parse it), and sent FP16 as JSON (refused); gRPC took all three.
    model = client.model("all_dtypes")
    before = inference_count(server, "all_dtypes")
    with pytest.raises(ts.InvalidInputError, match="'k' given both as a field and in"):
        model.generate(IN_INT32=[1], k=1, parameters={"k": 2})
    with pytest.raises(ts.InvalidInputError, match="'id' is the request's id"):
        model.generate(IN_INT32=[1], id=5)
    with pytest.raises(ts.InvalidInputError, match="'parameters' is where"):
        model.generate({"IN_INT32": [1], "parameters": {"a": 1}})
    with pytest.raises(ts.InvalidInputError, match="'k' given both"):
        model.generate_stream(IN_INT32=[1], k=1, parameters={"k": 2})
    # The error said "use the call's own options instead", of which generate has none.
    with pytest.raises(ts.InvalidInputError, match="'priority' cannot be a generate field"):
        model.generate(IN_INT32=[1], priority=1)
    with pytest.raises(ts.InvalidInputError, match="'sequence_id' cannot be a generate") as no:
        model.generate_stream(IN_INT32=[1], sequence_id=3)
    assert "priority=" not in str(no.value)  # (the hint is for priority alone)
    assert json.loads(model.generate(IN_INT32=[1], parameters={"id": 5})["PARAMETERS"]) == {"id": 5}
    if protocol == "http":
        with pytest.raises(ts.InvalidInputError, match="'IN_FP16' is FP16 or BF16"):
            model.generate(IN_FP16=[1.5])
        with pytest.raises(ts.InvalidInputError, match="'IN_FP16' is FP16 or BF16"):
            model.generate_stream(IN_FP16=[1.5])  # at the call, before any iteration
    else:
        assert model.generate(IN_FP16=[1.5])["OUT_FP16"] == 1.5
    assert inference_count(server, "all_dtypes") == before + (1 if protocol == "http" else 2)


@pytest.mark.parametrize("parameters", [1, [("a", 1)]])
def test_parameters_that_are_not_a_mapping_are_refused(client: Any, parameters: Any) -> None:
    # generate blamed the server's answer ("could not be read: AttributeError"), and
    # generate_stream raised a bare AttributeError.
    model = client.model("generator")
    with pytest.raises(ts.InvalidInputError, match="parameters must be a mapping"):
        model.generate(text_input="x", max_tokens=1, parameters=parameters)
    with pytest.raises(ts.InvalidInputError, match="parameters must be a mapping"):
        model.generate_stream(text_input="x", max_tokens=1, parameters=parameters)


def test_a_field_of_rank_2_is_refused_over_http(
    client: Any, server: LocalServer, protocol: str
) -> None:
    # The generate extension has no shapes: Triton could not make the [2, 2] tensor of
    # it ("The schema can not convert input 'X'"), after the request went.
    model = client.model("double")
    before = inference_count(server, "double")
    if protocol == "http":
        with pytest.raises(ts.InvalidInputError, match=r"'X' has shape \(2, 2\): use a gRPC"):
            model.generate(X=[[1, 2], [3, 4]])
        assert inference_count(server, "double") == before
    else:
        assert model.generate(X=[[1, 2], [3, 4]]) == {"Y": [2.0, 4.0, 6.0, 8.0]}


async def test_async_generate_streams_run_concurrently(url: str) -> None:
    async with ts.AsyncClient(url) as client:
        model = await client.model("generator")
        result = await model.generate(text_input="hi there", max_tokens=1)
        assert result == {"text_output": "hi ", "index": 0}

        async def collect(text: str) -> list[str]:
            return [
                str(chunk["text_output"])
                async for chunk in model.generate_stream(text_input=text, max_tokens=3)
            ]

        first, second = await asyncio.gather(collect("a b"), collect("c d"))
        assert first == ["a ", "b ", "a "]
        assert second == ["c ", "d ", "c "]

        # async with, and leaving early.
        repeat = await client.model("repeat")
        started = time.monotonic()
        async with repeat.generate_stream(IN=list(range(50)), DELAY_MS=50) as chunks:
            assert isinstance(chunks, ts.AsyncResponseStream)
            assert await anext(chunks) == {"OUT": 0, "IDX": 0}
        with pytest.raises(StopAsyncIteration):
            await anext(chunks)
        assert time.monotonic() - started < 1.75
        assert [chunk async for chunk in repeat.generate_stream(IN=[3])] == [{"OUT": 3, "IDX": 0}]


def test_a_large_event_is_read_whole(client: Any) -> None:
    # Over 512 KiB of JSON in one event line.
    chunks = list(client.model("zeros").generate_stream(COUNT=300_000))
    assert len(chunks) == 1
    assert chunks[0]["OUT"] == [0.0] * 300_000


def test_generate_on_an_ensemble_gives_its_outputs_only(client: Any) -> None:
    # Over HTTP the ensemble's answer also carried its sequence fields (sequence_id,
    # sequence_start, sequence_end), which gRPC, reading outputs, never showed.
    model = client.model("llm_trtllm")
    assert set(model.generate(text_input="a b", max_tokens=1)) <= set(model.spec.outputs)
    events = list(model.generate_stream(text_input="a b", max_tokens=1, stream=True))
    assert events
    assert all(set(event) <= set(model.spec.outputs) for event in events)


# A byte-level tokenizer streams bytes: utf8_pieces sends its input's UTF-8 bytes a few at
# a time, so characters of 2, 3 and 4 bytes are cut across responses.
SPLIT_TEXT = "안녕 héllo 👋!"


@pytest.mark.parametrize("piece_bytes", [1, 2, 5])
def test_characters_split_across_a_stream_arrive_whole(client: Any, piece_bytes: int) -> None:
    model = client.model("utf8_pieces")
    events = list(model.generate_stream(text_input=SPLIT_TEXT, piece_bytes=piece_bytes))
    size = len(SPLIT_TEXT.encode())
    assert len(events) == -(-size // piece_bytes)  # one event per response, none added
    texts = [event["text_output"] for event in events]
    assert "".join(texts) == SPLIT_TEXT
    assert not any("\ufffd" in text for text in texts)


def test_a_stream_that_ends_inside_a_character_ends_with_u_fffd(client: Any, protocol: str) -> None:
    if protocol == "http":
        pytest.skip("the generate extension carries text only: the input cannot be cut")
    model = client.model("utf8_pieces")
    events = list(model.generate_stream(text_input=b"ab" + "中".encode()[:2]))
    assert [event["text_output"] for event in events] == ["a", "b", "", "", "\ufffd"]


def test_a_stream_of_bytes_gives_each_response_s_own_bytes(client: Any) -> None:
    """model.stream hands BYTES back as they came (over HTTP too, whose events carry
    them inside JSON strings)."""
    model = client.model("utf8_pieces")
    pieces = [
        result["text_output"].reshape(-1)[0]
        for result in model.stream(text_input=[SPLIT_TEXT], piece_bytes=[3])
    ]
    data = SPLIT_TEXT.encode()
    assert pieces == [data[start : start + 3] for start in range(0, len(data), 3)]


def test_generate_on_a_decoupled_model_fails_at_its_second_response(
    client: Any, protocol: str
) -> None:
    """Over gRPC generate on a decoupled model reads a stream: it leaves it as soon as a
    second response shows the answer cannot be one, not after the whole stream. (Over
    HTTP the server answers once the model is done.)"""
    if protocol == "http":
        pytest.skip("the server's own generate endpoint")
    model = client.model("repeat")
    started = time.monotonic()
    with pytest.raises(ts.InferenceError, match=r"exactly (one|1) response") as caught:
        model.generate(IN=list(range(40)), DELAY_MS=100, timeout=30)
    assert caught.value.model == "repeat"
    # 40 responses 0.1 s apart would take 4 s.
    assert time.monotonic() - started < 3.0
