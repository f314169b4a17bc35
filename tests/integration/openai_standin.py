"""Stands in for Triton's OpenAI-compatible frontend (python/openai/openai_frontend in
triton-inference-server/server), which needs Triton's in-process Python bindings, and those
do not install here: it serves that frontend's JSON bodies, server-sent events and error
answers for ``/v1/models``, ``/v1/chat/completions`` and ``/v1/completions`` over a real
tritonserver, sending the vLLM-backend request that frontend builds to Triton's HTTP
generate extension; a Jinja chat template stands in for the tokenizer's.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Generator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, NoReturn

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["OpenAIStandIn"]

Json = dict[str, Any]
DEFAULT_MAX_TOKENS = 16  # the frontend's --default-max-tokens
TRITON_TIMEOUT = 300.0
OWNED_BY = "Triton Inference Server"
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"

# Request fields passed on as vLLM sampling parameters, in the schema's order, with the
# schema's default (None: left out unless given) and whether the schema makes them floats.
_SAMPLING: tuple[tuple[str, Any, bool], ...] = (
    ("frequency_penalty", 0, True),
    ("ignore_eos", False, False),
    ("logit_bias", None, False),
    ("min_tokens", None, False),
    ("n", 1, False),
    ("presence_penalty", 0, True),
    ("seed", None, False),
    ("stop", None, False),
    ("temperature", None, True),  # default: 0.7 for chat, 1 for completions
    ("top_p", 1, True),
)
_SHARED_FIELDS = "model logprobs max_tokens stream stream_options user"
_CHAT_FIELDS = {name for name, _, _ in _SAMPLING} | set(
    f"{_SHARED_FIELDS} messages top_logprobs max_completion_tokens response_format tools"
    " tool_choice function_call functions".split()
)
_COMPLETION_FIELDS = {name for name, _, _ in _SAMPLING} | set(
    f"{_SHARED_FIELDS} prompt best_of echo suffix".split()
)
# The schema's union of message classes: name, role, required fields in order.
_MESSAGE_KINDS = (
    ("ChatCompletionRequestSystemMessage", "system", ("content", "role")),
    ("ChatCompletionRequestUserMessage", "user", ("content", "role")),
    ("ChatCompletionRequestAssistantMessage", "assistant", ("role",)),
    ("ChatCompletionRequestToolMessage", "tool", ("role", "content", "tool_call_id")),
    ("ChatCompletionRequestFunctionMessage", "function", ("role", "content", "name")),
)
_NOT_A_DICT = "Input should be a valid dictionary or object to extract fields from"


class _Failure(Exception):
    """An error answered before any of the body went out: ``{"detail": detail}``."""

    def __init__(self, status: int, detail: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class _StreamAborted(Exception):
    """Triton failed after the headers went out: the frontend drops the connection."""


def _refuse(message: str) -> NoReturn:
    raise _Failure(400, message)


def _raise_exception(message: str) -> NoReturn:
    raise TemplateError(message)


def _error(kind: str, loc: list[Any], msg: str, value: Any, **ctx: Any) -> Json:
    error = {"type": kind, "loc": loc, "msg": msg, "input": value}
    return {**error, "ctx": ctx} if ctx else error


def _validate(body: Any, fields: set[str], required: tuple[str, ...]) -> Json:
    """The schema checks FastAPI answers with 422: required, unknown and message fields."""
    if not isinstance(body, dict):
        raise _Failure(422, [_error("model_attributes_type", ["body"], _NOT_A_DICT, body)])
    errors = []
    for name in required:
        if name not in body:
            errors.append(_error("missing", ["body", name], "Field required", body))
            continue
        value = body[name]
        if name == "messages" and not isinstance(value, list):
            errors.append(
                _error("list_type", ["body", name], "Input should be a valid list", value)
            )
        elif name == "messages" and not value:
            msg = "List should have at least 1 item after validation, not 0"
            ctx = {"field_type": "List", "min_length": 1, "actual_length": 0}
            errors.append(_error("too_short", ["body", name], msg, value, **ctx))
        elif name == "messages":
            for index, message in enumerate(value):
                errors.extend(_message_errors(["body", name, index], message))
    for name, value in body.items():
        if name not in fields:
            msg = "Extra inputs are not permitted"
            errors.append(_error("extra_forbidden", ["body", name], msg, value))
    if errors:
        raise _Failure(422, errors)
    return body


def _message_errors(loc: list[Any], message: Any) -> list[Json]:
    errors = []
    for kind, role, required in _MESSAGE_KINDS:
        if not isinstance(message, dict):
            errors.append(_error("model_attributes_type", [*loc, kind], _NOT_A_DICT, message))
            continue
        if message.get("role") == role and all(name in message for name in required):
            return []
        for name in required:
            if name not in message:
                errors.append(_error("missing", [*loc, kind, name], "Field required", message))
            elif name == "role" and message[name] != role:
                expected = f"'{role}'"
                msg = f"Input should be {expected}"
                errors.append(
                    _error("enum", [*loc, kind, name], msg, message[name], expected=expected)
                )
    return errors


def _conversation(messages: list[Json]) -> list[Json]:
    """The frontend's parse_chat_messages: the messages as the chat template sees them."""
    conversation = []
    for message in messages:
        role, content = message["role"], message.get("content")
        if isinstance(content, list):
            for part in content:
                if part.get("type") != "text":
                    _refuse(f"only text message is supported, but got {part.get('type')}")
            content = [{"type": "text", "text": part["text"]} for part in content]
        item: Json = {"role": role, "content": content}
        if role == "assistant" and message.get("tool_calls"):
            item["tool_calls"] = [
                {**call, "function": {**call["function"], "arguments": json.loads(arguments)}}
                for call in message["tool_calls"]
                for arguments in [call["function"]["arguments"]]
            ]
        elif role == "tool" and message.get("tool_call_id"):
            item["tool_call_id"] = message["tool_call_id"]
        if role == "user" and isinstance(message.get("name"), str):
            item["name"] = message["name"]
        conversation.append(item)
    return conversation


def _vllm_inputs(request: Json, prompt: str, temperature: float, max_tokens: Any) -> Json:
    """The frontend's _create_vllm_generate_request, as generate-extension JSON."""
    sampling: Json = {}
    for name, default, is_float in _SAMPLING:
        value = request.get(name, temperature if name == "temperature" else default)
        if name in request and is_float and type(value) is int:
            value = float(value)  # pydantic's confloat
        if value is not None:
            sampling[name] = value
    sampling["max_tokens"] = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    logprobs = request.get("logprobs")
    if request.get("messages") is not None and logprobs:  # chat: a bool and top_logprobs
        top = request.get("top_logprobs")
        sampling["logprobs"] = 1 if top is None else top
    elif "prompt" in request and type(logprobs) is int and logprobs > 0:
        sampling["logprobs"] = logprobs
    return {
        "return_logprobs": "logprobs" in sampling,
        "text_input": prompt,
        "stream": bool(request.get("stream")),
        "exclude_input_in_output": not request.get("echo"),
        "sampling_parameters": json.dumps(sampling),
        "return_num_input_tokens": True,
        "return_num_output_tokens": True,
    }


def _usage(event: Json) -> tuple[int, int] | None:
    if "num_input_tokens" not in event or "num_output_tokens" not in event:
        return None
    pair = [event["num_input_tokens"], event["num_output_tokens"]]
    prompt, completion = (value[0] if isinstance(value, list) else value for value in pair)
    return int(prompt), int(completion)


def _triton_error(body: bytes) -> str:
    try:
        return str(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return body.decode(errors="replace")


def _events(response: Any) -> Generator[tuple[Json, bool], None, None]:
    """Triton's server-sent events as (event, final): the vLLM backend sends its last
    output in the response flagged final, which here is the last event."""
    with response:
        held: Json | None = None
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            event = json.loads(line[5:])
            if held is not None:
                yield held, False
            if "error" in event:
                raise _StreamAborted(str(event["error"]))
            held = event
        yield ({} if held is None else held), True


class _Reply:
    """The id, time, model and object type every body of one answer shares."""

    def __init__(self, model: str, kind: str) -> None:
        self.id, self.created = f"cmpl-{uuid.uuid1()}", int(time.time())
        self.model, self.kind = model, kind

    def body(self, choices: list[Json], usage: tuple[int, int] | None = None) -> Json:
        counts = None
        if usage is not None:
            prompt, completion = usage
            total = prompt + completion
            counts = {
                "prompt_tokens": prompt,
                "total_tokens": total,
                "completion_tokens": completion,
            }
        return {
            "id": self.id,
            "choices": choices,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "object": self.kind,
            "usage": counts,
        }


class OpenAIStandIn:
    """Triton's OpenAI-compatible API on a free loopback port, over a real tritonserver.

    A context manager. ``url`` is the API base, ``http://127.0.0.1:PORT/v1``;
    ``received`` lists ``(path, parsed JSON body or None)`` for each request served,
    ``headers`` the headers of each POST.

    As the frontend does: errors are ``{"detail": ...}`` (400 for what it refuses, 422 for
    schema errors, 500 for Triton's and the template's errors); ``finish_reason`` is always
    "stop"; n > 1 is refused; an error after a stream began drops the connection without
    the last chunk. Unlike it: tool_choice other than "none" is refused (the frontend
    guides decoding to a tool call) and logprobs are asked of Triton but not returned.
    """

    def __init__(
        self, triton_http_url: str, chat_template: str, *, models: Sequence[str] = ("llm_vllm",)
    ) -> None:
        self.triton_http_url = triton_http_url.rstrip("/")
        self.models = tuple(models)
        self.received: list[tuple[str, Any]] = []
        self.headers: list[dict[str, str]] = []  # of each POST, names in lower case
        self.created = int(time.time())
        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        environment.globals["raise_exception"] = _raise_exception
        environment.globals.update(bos_token="", eos_token="")  # (a tokenizer's, here none)
        self._template = environment.from_string(chat_template)
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.standin = self
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="openai-standin",
            daemon=True,
        )

    def __enter__(self) -> OpenAIStandIn:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def model_json(self, name: str) -> Json:
        return {"id": name, "created": self.created, "object": "model", "owned_by": OWNED_BY}

    def chat(self, body: Any, out: _Handler) -> None:
        request = _validate(body, _CHAT_FIELDS, ("messages", "model"))
        self._check(request)
        if request.get("top_logprobs") is not None and not request.get("logprobs"):
            _refuse("`top_logprobs` can only be used when `logprobs` is True")
        tools, choice = request.get("tools"), request.get("tool_choice")
        if choice == "required" and not tools:
            _refuse(
                '"required" tool choice requires CreateChatCompletionRequest.tools to be provided'
            )
        if isinstance(choice, dict) and not tools:
            _refuse("Named tool choice requires CreateChatCompletionRequest.tools to be provided")
        if choice == "auto":
            _refuse('"auto" tool choice requires --tool-call-parser to be set')
        if choice is None and tools:
            _refuse("having tools in the request requires --tool-call-parser to be set")
        if choice not in (None, "none"):  # the frontend would guide decoding to a tool call
            _refuse("the stand-in serves tool_choice 'none' only")
        self._check_stream_options(request)
        tool_dicts = None
        if tools is not None:
            tool_dicts = [
                {"type": tool["type"], "function": {key: tool["function"].get(key) for key in keys}}
                for tool in tools
                for keys in [("description", "name", "parameters")]
            ]
        conversation = _conversation(request["messages"])
        prompt = self._template.render(
            messages=conversation,
            tools=tool_dicts,
            add_generation_prompt=True,
            bos_token="",
            eos_token="",
        )
        max_tokens = request.get("max_completion_tokens")
        if max_tokens is None:
            max_tokens = request.get("max_tokens")
        response = self._call(request, _vllm_inputs(request, prompt, 0.7, max_tokens))
        reply = _Reply(request["model"], "chat.completion")

        def choice_json(text: str, final: bool) -> Json:
            delta = {"content": text, "function_call": None, "role": None}
            finish = "stop" if final else None
            return {"delta": delta, "logprobs": None, "finish_reason": finish, "index": 0}

        if not request.get("stream"):
            event = _single(response)
            message = {
                "content": event.get("text_output", ""),
                "tool_calls": None,
                "role": "assistant",
                "function_call": None,
            }
            result = {"finish_reason": "stop", "index": 0, "message": message, "logprobs": None}
            out.send_json(200, reply.body([result], _usage(event)))
            return
        reply.kind = "chat.completion.chunk"
        first = choice_json("", False)
        first["delta"]["role"] = "assistant"
        self._stream(out, request, reply, response, choice_json, first)

    def completion(self, body: Any, out: _Handler) -> None:
        request = _validate(body, _COMPLETION_FIELDS, ("model", "prompt"))
        if request["model"] not in self.models:
            _refuse(f"Unknown model: {request['model']}")
        if request.get("suffix") is not None:
            _refuse("suffix is not currently supported")
        if not request["prompt"]:
            _refuse("prompt must be non-empty")
        if not isinstance(request["prompt"], str):
            _refuse("only single string input is supported")
        if "best_of" in request:
            _refuse("best_of is no longer supported in vLLM backend, removed from vLLM V1 engine")
        self._check(request, logit_bias="logit bias is not supported")
        self._check_stream_options(request)
        inputs = _vllm_inputs(request, request["prompt"], 1, request.get("max_tokens"))
        response = self._call(request, inputs)
        reply = _Reply(request["model"], "text_completion")

        def choice_json(text: str, final: bool) -> Json:
            finish = "stop" if final else None
            return {"finish_reason": finish, "index": 0, "logprobs": None, "text": text}

        if not request.get("stream"):
            event = _single(response)
            text = event.get("text_output", "")
            out.send_json(200, reply.body([choice_json(text, True)], _usage(event)))
            return
        self._stream(out, request, reply, response, choice_json, None)

    def _check(
        self, request: Json, logit_bias: str = "logit bias is not currently supported"
    ) -> None:
        if request["model"] not in self.models:
            _refuse(f"Unknown model: {request['model']}")
        n = request.get("n")
        if isinstance(n, int) and n > 1:
            _refuse(f"Received n={n}, but only single choice (n=1) is currently supported")
        if request.get("logit_bias") is not None:
            _refuse(logit_bias)

    @staticmethod
    def _check_stream_options(request: Json) -> None:
        if request.get("stream_options") is not None and not request.get("stream"):
            _refuse("`stream_options` can only be used when `stream` is True")

    def _call(self, request: Json, inputs: Json) -> Any:
        """Sends the request to Triton; a request it refuses is a 500 (the frontend turns
        the error the bindings raise into ``{"detail": message}``)."""
        route = "generate_stream" if inputs["stream"] else "generate"
        url = f"{self.triton_http_url}/v2/models/{request['model']}/{route}"
        call = urllib.request.Request(
            url, json.dumps(inputs).encode(), {"Content-Type": "application/json"}
        )
        try:
            return urllib.request.urlopen(call, timeout=TRITON_TIMEOUT)
        except urllib.error.HTTPError as error:
            if inputs["stream"] and "event-stream" in error.headers.get("Content-Type", ""):
                return error  # the first response was an error: it comes as an event
            raise _Failure(500, _triton_error(error.read())) from None
        except OSError as error:
            raise _Failure(500, str(error)) from None

    def _stream(
        self,
        out: _Handler,
        request: Json,
        reply: _Reply,
        response: Any,
        choice_json: Callable[[str, bool], Json],
        first: Json | None,
    ) -> None:
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        events = _events(response)
        out.start_stream()
        try:
            if first is not None:
                out.send_event(reply.body([first]))
            prompt_tokens: int | None = None
            completion_tokens = 0
            for event, final in events:
                usage = _usage(event)
                if include_usage and usage is not None:
                    prompt_tokens = usage[0] if prompt_tokens is None else prompt_tokens
                    completion_tokens += usage[1]
                out.send_event(reply.body([choice_json(event.get("text_output", ""), final)]))
            if include_usage and prompt_tokens is not None:
                out.send_event(reply.body([], (prompt_tokens, completion_tokens)))
            out.send_event("[DONE]")
            out.end_stream()
        except Exception:  # the frontend's stream fails as a whole
            out.close_connection = True  # no last chunk: the client sees the stream cut
        finally:
            events.close()


def _single(response: Any) -> Json:
    with response:
        event: Json = json.loads(response.read())
    if "error" in event:
        raise _Failure(500, str(event["error"]))
    return event


class _Server(ThreadingHTTPServer):
    standin: OpenAIStandIn


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 60.0
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        standin, path = self.server.standin, self.path.split("?")[0]
        standin.received.append((path, None))
        name = path.removeprefix("/v1/models/")
        if path == "/v1/models":
            models = [standin.model_json(name) for name in standin.models]
            self.send_json(200, {"object": "list", "data": models})
        elif name != path and name in standin.models:
            self.send_json(200, standin.model_json(name))
        elif name != path:
            self.send_json(404, {"detail": f"Unknown model: {name}"})
        else:
            self.send_not_found(path)

    def do_POST(self) -> None:
        standin, path = self.server.standin, self.path.split("?")[0]
        standin.headers.append({name.lower(): value for name, value in self.headers.items()})
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError as error:
            standin.received.append((path, None))
            if path not in (CHAT, COMPLETIONS):
                self.send_not_found(path)
                return
            ctx = {"error": getattr(error, "msg", str(error))}
            loc = ["body", getattr(error, "pos", 0)]
            detail = _error("json_invalid", loc, "JSON decode error", {}, **ctx)
            self.send_json(422, {"detail": [detail]})
            return
        standin.received.append((path, body))
        routes = {CHAT: standin.chat, COMPLETIONS: standin.completion}
        if path not in routes:
            self.send_not_found(path)
            return
        try:
            if body is None:
                raise _Failure(422, [_error("missing", ["body"], "Field required", None)])
            routes[path](body, self)
        except _Failure as failure:
            self.send_json(failure.status, {"detail": failure.detail})
        except Exception as error:  # the frontend answers any other failure with a 500
            self.send_json(500, {"detail": str(error)})

    def send_not_found(self, path: str) -> None:
        routes = {"/v1/models": "GET", CHAT: "POST", COMPLETIONS: "POST"}
        if routes.get(path, self.command) != self.command:
            self.send_json(405, {"detail": "Method Not Allowed"})
        else:
            self.send_json(404, {"detail": "Not Found"})

    def send_json(self, status: int, body: Any) -> None:
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def send_event(self, data: Json | str) -> None:
        if not isinstance(data, str):
            data = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        chunk = f"data: {data}\n\n".encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.flush()

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
