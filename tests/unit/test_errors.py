"""The exception tree and the classification of server answers and transport failures."""

from __future__ import annotations

import asyncio
import http.client
import ssl

import pytest

import triton_sdk as ts
from triton_sdk._base import with_suggestions
from triton_sdk._errors import classify_status, classify_transport_error, names_no_server

UNKNOWN_MODEL = "Request for unknown model: 'nope' is not found"
UNKNOWN_VERSION = "Request for unknown model: 'simple' version 3 is not found"
NO_VERSIONS = "Request for unknown model: 'densenet_onnx' has no available versions"
VERSION_NOT_READY = "Request for unknown model: 'flaky' version 1 is not at ready state"
QUEUE_FULL = "Exceeds maximum queue size"
REFUSED = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:8001: "
    "Failed to connect to remote host: Connection refused"
)
TLS_WRONG_VERSION = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:8001: "
    "Ssl handshake failed: SSL_ERROR_SSL: error:100000f7:SSL routines:"
    "OPENSSL_internal:WRONG_VERSION_NUMBER"
)
TLS_BAD_CERT = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:8443: "
    "Ssl handshake failed: SSL_ERROR_SSL: error:1000007d:SSL routines:"
    "OPENSSL_internal:CERTIFICATE_VERIFY_FAILED"
)
TLS_HANDSHAKE = "failed to connect to all addresses; last error: Handshake failed"
TLS_WRONG_NAME = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:8001: Custom "
    "verification check failed with error: UNAUTHENTICATED: Hostname Verification Check failed."
)
RESTRICTED = "This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'"
SHAPE = "unexpected shape for input 'IN' for model 'm'. Expected [-1,3], got [2,4]."
MODEL_FAILED = "Failed to process the request(s) for model 'm_0_0', message: ValueError: boom"


@pytest.mark.parametrize(
    ("status", "message", "error_class", "retryable"),
    [
        # unknown model / version
        ("NOT_FOUND", UNKNOWN_MODEL, ts.ModelNotFoundError, False),
        (404, UNKNOWN_MODEL, ts.ModelNotFoundError, False),
        ("NOT_FOUND", UNKNOWN_VERSION, ts.ModelNotFoundError, False),
        (404, UNKNOWN_VERSION, ts.ModelNotFoundError, False),
        # statistics and trace settings say "unknown model" with INVALID_ARGUMENT / 400
        (
            "INVALID_ARGUMENT",
            "requested model 'nope' is not available",
            ts.ModelNotFoundError,
            False,
        ),
        (
            400,
            "requested model version is not available for model 'scale'",
            ts.ModelNotFoundError,
            False,
        ),
        (400, "Request for unknown model : nope", ts.ModelNotFoundError, False),
        # known, but nothing loaded
        ("NOT_FOUND", NO_VERSIONS, ts.ModelNotReadyError, False),
        (404, NO_VERSIONS, ts.ModelNotReadyError, False),
        # a version asked for by number, unloaded or loading (a connection error and a
        # retried 503 before)
        ("UNAVAILABLE", VERSION_NOT_READY, ts.ModelNotReadyError, False),
        (503, VERSION_NOT_READY, ts.ModelNotReadyError, False),
        ("NOT_FOUND", VERSION_NOT_READY, ts.ModelNotReadyError, False),
        # queue full: the server is fine, the model is busy
        ("UNAVAILABLE", QUEUE_FULL, ts.ServerOverloadedError, True),
        (503, QUEUE_FULL, ts.ServerOverloadedError, True),
        ("UNAVAILABLE", "Request timeout expired", ts.ServerOverloadedError, True),
        # server unreachable
        ("UNAVAILABLE", REFUSED, ts.TritonConnectionError, True),
        ("UNAVAILABLE", "Socket closed", ts.TritonConnectionError, True),
        # TLS refusals do not heal by waiting
        ("UNAVAILABLE", TLS_WRONG_VERSION, ts.TritonConnectionError, False),
        ("UNAVAILABLE", TLS_BAD_CERT, ts.TritonConnectionError, False),
        ("UNAVAILABLE", TLS_HANDSHAKE, ts.TritonConnectionError, False),
        ("UNAVAILABLE", TLS_WRONG_NAME, ts.TritonConnectionError, False),
        # restricted protocol: an authentication refusal
        ("UNAVAILABLE", RESTRICTED, ts.InferenceError, False),
        # load/unload on a server that does not allow it
        (
            "UNAVAILABLE",
            "explicit model load / unload is not allowed if polling is enabled",
            ts.InferenceError,
            False,
        ),
        # a bad log setting: HTTP says 503, but waiting does not mend it
        (503, "invalid argument for --log_format, got: bogus", ts.InferenceError, False),
        # a connection that failed with EINVAL is still a connection failure
        (
            "UNAVAILABLE",
            "failed to connect to all addresses; last error: Invalid argument",
            ts.TritonConnectionError,
            True,
        ),
        # timeouts
        ("DEADLINE_EXCEEDED", "Deadline Exceeded", ts.TritonTimeoutError, False),
        # request and model failures
        ("INVALID_ARGUMENT", SHAPE, ts.InferenceError, False),
        (400, SHAPE, ts.InferenceError, False),
        ("INTERNAL", MODEL_FAILED, ts.InferenceError, False),
        (500, MODEL_FAILED, ts.InferenceError, False),
        ("UNIMPLEMENTED", "Method not found!", ts.UnsupportedError, False),
        (
            "UNIMPLEMENTED",
            "Method not found: inference.GRPCInferenceService/ModelStatistics",  # grpc-java
            ts.UnsupportedError,
            False,
        ),
        (
            "UNIMPLEMENTED",
            "unknown method ModelStatistics for service inference.GRPCInferenceService",  # Go
            ts.UnsupportedError,
            False,
        ),
        (
            "UNIMPLEMENTED",
            "unknown service inference.GRPCInferenceService",
            ts.UnsupportedError,
            False,
        ),
        # What the server or model cannot do (Triton's UNSUPPORTED), its words kept
        (
            "UNIMPLEMENTED",
            "ModelInfer RPC doesn't support decoupled models",
            ts.UnsupportedRequestError,
            False,
        ),
        (
            501,
            "HTTP end point doesn't support models with decoupled transaction policy",
            ts.UnsupportedRequestError,
            False,
        ),
        (501, "Model versioning not supported yet.", ts.UnsupportedRequestError, False),
    ],
)
def test_classify_status(
    status: str | int, message: str, error_class: type[ts.TritonError], retryable: bool
) -> None:
    error = classify_status(status, message, model="m", request_id="r1")
    assert type(error) is error_class
    assert error.retryable is retryable
    assert error.status == status
    assert error.model == "m"
    assert error.request_id == "r1"
    tls_refusal = error_class is ts.TritonConnectionError and not retryable
    assert str(error) == (f"TLS failure: {message}" if tls_refusal else message)


@pytest.mark.parametrize("message", [TLS_WRONG_VERSION, TLS_BAD_CERT, TLS_WRONG_NAME])
def test_a_grpc_tls_refusal_says_so_as_https_does(message: str) -> None:
    # gRPC's words alone ("failed to connect to all addresses") read as a server down.
    error = classify_status("UNAVAILABLE", message)
    assert str(error).startswith("TLS failure: failed to connect")


@pytest.mark.parametrize("status", [502, 503, 504])
def test_gateway_statuses_are_retryable(status: int) -> None:
    error = classify_status(status, "Bad Gateway")
    assert isinstance(error, ts.TritonError)
    assert error.retryable
    assert error.status == status


@pytest.mark.parametrize("status", [400, 401, 403, 409, 500])
def test_other_http_statuses_are_not_retryable(status: int) -> None:
    error = classify_status(status, "some failure")
    assert isinstance(error, ts.InferenceError)
    assert not error.retryable


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ("UNIMPLEMENTED", "ModelInfer RPC doesn't support decoupled models"),
        (501, "Model versioning not supported yet."),
    ],
)
def test_a_refused_request_is_caught_as_unsupported_and_as_an_inference_error(
    status: str | int, message: str
) -> None:
    # API.md: a model error arrives as InferenceError; the server's UNSUPPORTED is one too.
    error = classify_status(status, message)
    with pytest.raises(ts.InferenceError):
        raise error
    with pytest.raises(ts.UnsupportedError):
        raise error


def test_what_a_model_cannot_do_is_not_read_as_a_missing_endpoint() -> None:
    # Its own words say what; a missing endpoint's are reworded to name the server.
    assert not names_no_server(classify_status(501, "Model versioning not supported yet."))
    assert not names_no_server(classify_status("UNIMPLEMENTED", "doesn't support decoupled"))
    assert names_no_server(classify_status("UNIMPLEMENTED", "Method not found!"))


def test_http_restricted_api_is_not_retryable() -> None:
    error = classify_status(403, "This API is restricted, expecting header 'admin-key'")
    assert not error.retryable


def test_status_classification_is_case_insensitive() -> None:
    assert isinstance(classify_status(404, UNKNOWN_MODEL.upper()), ts.ModelNotFoundError)
    assert classify_status("UNAVAILABLE", QUEUE_FULL.lower()).retryable


@pytest.mark.parametrize(
    ("exc", "error_class", "retryable"),
    [
        (TimeoutError("timed out"), ts.TritonTimeoutError, False),
        (asyncio.TimeoutError(), ts.TritonTimeoutError, False),
        (ConnectionRefusedError(111, "Connection refused"), ts.TritonConnectionError, True),
        (ConnectionResetError(104, "Connection reset by peer"), ts.TritonConnectionError, True),
        (BrokenPipeError(32, "Broken pipe"), ts.TritonConnectionError, True),
        (
            http.client.RemoteDisconnected("Remote end closed connection without response"),
            ts.TritonConnectionError,
            True,
        ),
        (OSError(113, "No route to host"), ts.TritonConnectionError, True),
        (
            ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"),
            ts.TritonConnectionError,
            False,
        ),
        (
            ssl.SSLCertVerificationError(1, "certificate verify failed"),
            ts.TritonConnectionError,
            False,
        ),
    ],
)
def test_classify_transport_error(
    exc: BaseException, error_class: type[ts.TritonError], retryable: bool
) -> None:
    error = classify_transport_error(exc, model="m", request_id="r1")
    assert type(error) is error_class
    assert error.retryable is retryable
    assert error.status is None
    assert error.model == "m"
    assert error.request_id == "r1"


def test_transport_error_message_keeps_the_detail() -> None:
    error = classify_transport_error(ConnectionRefusedError(111, "Connection refused"))
    assert error is not None
    assert "Connection refused" in str(error)
    timeout = classify_transport_error(TimeoutError())
    assert timeout is not None
    assert str(timeout)  # never empty, even for an exception without a message


@pytest.mark.parametrize("exc", [ValueError("x"), KeyError("k"), RuntimeError("r")])
def test_unknown_transport_errors_are_not_classified(exc: BaseException) -> None:
    assert classify_transport_error(exc) is None


@pytest.mark.parametrize(
    ("error_class", "builtin"),
    [
        (ts.InvalidInputError, ValueError),
        (ts.TritonConnectionError, ConnectionError),
        (ts.TritonTimeoutError, TimeoutError),
        (ts.UnknownOutputError, KeyError),
    ],
)
def test_errors_are_also_builtin_exceptions(
    error_class: type[ts.TritonError], builtin: type[BaseException]
) -> None:
    assert issubclass(error_class, ts.TritonError)
    assert issubclass(error_class, builtin)
    with pytest.raises(builtin):
        raise error_class("boom")


@pytest.mark.parametrize(
    "error_class",
    [
        ts.InvalidInputError,
        ts.UnknownOutputError,
        ts.ModelNotFoundError,
        ts.ModelNotReadyError,
        ts.TritonConnectionError,
        ts.TritonTimeoutError,
        ts.InferenceError,
    ],
)
def test_every_error_is_a_triton_error(error_class: type[ts.TritonError]) -> None:
    assert issubclass(error_class, ts.TritonError)
    assert issubclass(ts.TritonError, Exception)


def test_model_errors_are_not_builtin_lookup_errors() -> None:
    assert not issubclass(ts.ModelNotFoundError, LookupError)
    assert not issubclass(ts.InferenceError, ts.TritonConnectionError)


def test_attributes_default_to_none() -> None:
    error = ts.TritonError("boom")
    assert error.message == "boom"
    assert error.status is None
    assert error.model is None
    assert error.request_id is None
    assert error.retryable is False


def test_attributes() -> None:
    error = ts.InferenceError("failed", status="INTERNAL", model="m", request_id="r1")
    assert error.status == "INTERNAL"
    assert error.model == "m"
    assert error.request_id == "r1"
    assert ts.InferenceError("x", status=500).status == 500


@pytest.mark.parametrize(
    "error_class",
    [ts.TritonError, ts.InvalidInputError, ts.UnknownOutputError, ts.TritonTimeoutError],
)
def test_str_is_the_message(error_class: type[ts.TritonError]) -> None:
    # KeyError's own str() would quote the message; the SDK's errors do not.
    error = error_class("the result has no output 'X'", status=400)
    assert str(error) == "the result has no output 'X'"
    assert error.args == ("the result has no output 'X'",)


def test_repr_names_class_message_and_status() -> None:
    text = repr(ts.InferenceError("boom", status=503))
    assert "InferenceError" in text
    assert "boom" in text
    assert "503" in text


@pytest.mark.parametrize(
    ("message", "error_class"),
    [
        (UNKNOWN_MODEL, ts.ModelNotFoundError),
        (NO_VERSIONS, ts.ModelNotReadyError),
        (MODEL_FAILED, ts.InferenceError),
    ],
)
def test_errors_inside_successful_answers_are_classified_by_message(
    message: str, error_class: type[ts.TritonError]
) -> None:
    from triton_sdk._errors import classify_message

    error = classify_message(message, status=200, model="m", request_id="r")
    assert type(error) is error_class
    assert (error.status, error.model, error.request_id) == (200, "m", "r")
    assert not error.retryable


def test_a_host_name_with_tls_in_it_is_not_a_tls_failure() -> None:
    message = (
        "failed to connect to all addresses; last error: "
        "DNS resolution failed for triton-tls.internal"
    )
    error = classify_status("UNAVAILABLE", message)
    assert isinstance(error, ts.TritonConnectionError)
    assert error.retryable


# Messages that say what to do


def test_an_http2_answer_to_an_http1_request_says_use_grpc() -> None:
    import http.client

    line = "\x00\x00\x06\x04\x00\x00\x00\x00\x00"
    error = classify_transport_error(http.client.BadStatusLine(line), url="http://h:8001")
    assert isinstance(error, ts.TritonConnectionError)
    assert not error.retryable
    assert "the server at http://h:8001 answered in HTTP/2" in str(error)
    assert "use grpc://" in str(error)


def test_a_connection_failure_names_the_url() -> None:
    error = classify_transport_error(ConnectionRefusedError(111, "refused"), url="http://h:9")
    assert isinstance(error, ts.TritonConnectionError)
    assert error.retryable
    assert str(error).startswith("connection to http://h:9 failed:")


def test_a_timeout_names_the_model_and_the_time() -> None:
    error = classify_transport_error(TimeoutError("timed out"), model="sleep", timeout=0.5)
    assert str(error) == (
        "no answer from model 'sleep' within 0.5 s (timed out); the server may still run "
        "the request"
    )


@pytest.mark.parametrize(
    ("name", "known", "expected"),
    [
        ("text_embd", ["add_sub", "text_embed"], "; did you mean 'text_embed'? The repository has"),
        ("zzz", ["add_sub"], "; The repository has 'add_sub'"),
        ("m", [], "; the repository has no models"),
        ("add_sub", ["add_sub"], ""),  # the model is there; its version is not
    ],
)
def test_suggestions_for_an_unknown_model(name: str, known: list[str], expected: str) -> None:
    assert with_suggestions("unknown", name, known) == "unknown" + expected + (
        "" if not expected.endswith("has") else " " + ", ".join(map(repr, known))
    )


def test_many_models_are_cut_short() -> None:
    known = [f"m{i:02}" for i in range(25)]
    assert with_suggestions("x", "q", known).endswith("'m19' and 5 more")
