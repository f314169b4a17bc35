"""The public surface of ``import triton_sdk as ts``: names, sync/async parity, value types."""

from __future__ import annotations

import copy
import inspect
import pickle
import re
import subprocess
import sys
from typing import Any

import attrs
import pytest

import triton_sdk as ts
from triton_sdk.testing import MockTransport

from ._both import resolve

EXPORTED = [
    "NOT_GIVEN",
    "AsyncClient",
    "AsyncModel",
    "AsyncModelSequence",
    "AsyncResponseStream",
    "AsyncTransport",
    "BatchStatistics",
    "CallContext",
    "CallHook",
    "Classification",
    "Client",
    "DurationStatistics",
    "EndpointState",
    "InferResult",
    "InferenceError",
    "InferenceStatistics",
    "InputValue",
    "InvalidInputError",
    "JSONValue",
    "LogSettings",
    "Model",
    "ModelMetrics",
    "ModelNotFoundError",
    "ModelNotReadyError",
    "ModelSequence",
    "ModelSpec",
    "ModelStatistics",
    "ModelStatus",
    "NotGiven",
    "ParameterInput",
    "ParameterValue",
    "Priority",
    "ResponseStream",
    "RetryBudget",
    "RetryPolicy",
    "SequenceLostError",
    "SequenceNotEndedWarning",
    "ServerOverloadedError",
    "ServerMetadata",
    "ServerMetrics",
    "SharedMemoryRegion",
    "CudaSharedMemoryRegion",
    "TLSConfig",
    "TensorSpec",
    "TraceSettings",
    "Transport",
    "TritonConnectionError",
    "TritonError",
    "TritonTimeoutError",
    "UnknownOutputError",
    "AsyncChat",
    "AsyncChatCompletions",
    "AsyncCompletions",
    "Chat",
    "ChatCompletions",
    "Completions",
    "ChatChoice",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatMessage",
    "ChatTemplateError",
    "ChoiceDelta",
    "ChunkChoice",
    "Completion",
    "CompletionChoice",
    "CompletionChunk",
    "Usage",
    "UnsupportedError",
    "UnsupportedRequestError",
    "__version__",
]


def test_all_is_pinned() -> None:
    # A change here is a change of the public API: update API.md and this list together.
    assert sorted(ts.__all__) == sorted(EXPORTED)
    assert len(set(ts.__all__)) == len(ts.__all__)


@pytest.mark.parametrize("name", EXPORTED)
def test_every_exported_name_exists(name: str) -> None:
    assert getattr(ts, name) is not None


def test_version() -> None:
    assert isinstance(ts.__version__, str)
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", ts.__version__)


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, Any] = {}
    exec("from triton_sdk import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(EXPORTED)


# Sync/async parity

SYNC_ONLY = {"close"}
ASYNC_ONLY = {"aclose"}


def public_methods(cls: type) -> dict[str, Any]:
    members = {name: inspect.getattr_static(cls, name) for name in dir(cls)}
    return {
        name: member
        for name, member in members.items()
        if not name.startswith("_") and inspect.isfunction(member)
    }


def public_properties(cls: type) -> set[str]:
    return {
        name
        for name in dir(cls)
        if not name.startswith("_") and isinstance(inspect.getattr_static(cls, name), property)
    }


def _sync_spelling(annotation: Any) -> Any:
    """An annotation with the asynchronous twins' names read as the blocking ones."""
    if not isinstance(annotation, str):
        return annotation
    names = "Client|Model|ModelSequence|ResponseStream|Iterator|Samples|Transport"
    annotation = re.sub(
        r"\bAsyncGenerator\[(.+?), None\]", r"Generator[\1, None, None]", annotation
    )
    return re.sub(rf"\bAsync({names})\b", r"\1", annotation)


def normalised(signature: inspect.Signature) -> inspect.Signature:
    """The signature as the blocking twin would spell it (AsyncModel -> Model...).

    ``AsyncModel.map`` also takes async iterables (``AsyncSamples``), spelt ``Samples``.
    """
    parameters = [
        parameter.replace(annotation=_sync_spelling(parameter.annotation))
        for parameter in signature.parameters.values()
    ]
    return signature.replace(
        parameters=parameters, return_annotation=_sync_spelling(signature.return_annotation)
    )


PAIRS = [
    (ts.Client, ts.AsyncClient),
    (ts.Model, ts.AsyncModel),
    (ts.ModelSequence, ts.AsyncModelSequence),
]
IDS = ["Client", "Model", "ModelSequence"]

# Methods of the asyncio classes that are used with `async for` / `async with` rather
# than awaited: they return an asynchronous iterator or context manager at once.
NOT_AWAITED = {"stream", "generate_stream", "chat_stream", "complete_stream", "map", "sequence"}
NO_NETWORK = {"endpoints"}  # reports what the client holds; sends nothing


@pytest.mark.parametrize(("sync", "asynchronous"), PAIRS, ids=IDS)
def test_same_public_methods(sync: type, asynchronous: type) -> None:
    assert set(public_methods(sync)) - SYNC_ONLY == set(public_methods(asynchronous)) - ASYNC_ONLY
    assert public_properties(sync) == public_properties(asynchronous)


@pytest.mark.parametrize(("sync", "asynchronous"), PAIRS, ids=IDS)
def test_same_signatures(sync: type, asynchronous: type) -> None:
    sync_methods = public_methods(sync)
    async_methods = public_methods(asynchronous)
    for name in sorted(set(sync_methods) - SYNC_ONLY):
        sync_signature = normalised(inspect.signature(sync_methods[name]))
        async_signature = normalised(inspect.signature(async_methods[name]))
        assert sync_signature == async_signature, name


def test_close_and_aclose_have_the_same_signature() -> None:
    assert inspect.signature(ts.Client.close) == inspect.signature(ts.AsyncClient.aclose)


def test_constructors_match() -> None:
    assert normalised(inspect.signature(ts.Client)) == normalised(inspect.signature(ts.AsyncClient))


def test_context_managers() -> None:
    assert hasattr(ts.Client, "__enter__")
    assert hasattr(ts.Client, "__exit__")
    assert not hasattr(ts.Client, "__aenter__")
    assert hasattr(ts.AsyncClient, "__aenter__")
    assert hasattr(ts.AsyncClient, "__aexit__")
    assert not hasattr(ts.AsyncClient, "__enter__")
    assert inspect.iscoroutinefunction(ts.AsyncClient.__aenter__)
    assert inspect.iscoroutinefunction(ts.AsyncClient.__aexit__)


@pytest.mark.parametrize("cls", [ts.AsyncClient, ts.AsyncModel, ts.AsyncModelSequence])
def test_async_methods_are_coroutine_functions(cls: type) -> None:
    methods = public_methods(cls)
    assert methods
    for name, method in methods.items():
        # API.md: "every network method is a coroutine"; streams are iterated with async for.
        if name in NO_NETWORK:
            assert not inspect.iscoroutinefunction(method), name
        elif name in NOT_AWAITED:
            assert not inspect.iscoroutinefunction(method), name
            returned = str(inspect.signature(method).return_annotation)
            assert re.search(r"Async(ResponseStream|Iterator|Generator|ModelSequence)", returned), (
                name
            )
        else:
            assert inspect.iscoroutinefunction(method), name


@pytest.mark.parametrize("cls", [ts.Client, ts.Model])
def test_sync_methods_are_plain_functions(cls: type) -> None:
    for name, method in public_methods(cls).items():
        assert not inspect.iscoroutinefunction(method), name
        assert not inspect.isasyncgenfunction(method), name


def test_model_handles_expose_name_version_spec() -> None:
    for cls in (ts.Model, ts.AsyncModel):
        for name in ("name", "version", "spec"):
            assert hasattr(cls, name)


# Frozen value types


FROZEN = [
    (ts.ModelSpec, {"name": "m"}, "name"),
    (ts.TensorSpec, {"name": "x", "datatype": "FP32", "shape": (1,)}, "shape"),
    (ts.RetryPolicy, {}, "max_attempts"),
    (ts.RetryBudget, {}, "reserve"),
    (
        ts.EndpointState,
        {
            "url": "grpc://a:8001",
            "healthy": True,
            "in_flight": 0,
            "requests": 0,
            "failures": 0,
            "ejections": 0,
        },
        "healthy",
    ),
    (ts.ServerMetadata, {"name": "triton", "version": "2.50.0"}, "version"),
    (ts.ModelStatus, {"name": "m"}, "state"),
    (ts.TLSConfig, {}, "ca_file"),
    (ts.ServerMetrics, {"server": {"nv_cpu_utilization": 0.5}}, "models"),
    (
        ts.ModelSpec,
        {
            "name": "m",
            "max_batch_size": 8,
            "inputs": {"X": ts.TensorSpec("X", datatype="FP32", shape=(4,))},
            "outputs": {"Y": ts.TensorSpec("Y", datatype="BYTES", shape=(-1,))},
            "parameters": {"chat_template": "{{ x }}"},
        },
        "inputs",
    ),
]


@pytest.mark.parametrize(
    ("cls", "kwargs", "field"), FROZEN, ids=[cls.__name__ for cls, _, _ in FROZEN]
)
def test_value_types_are_frozen_attrs_classes(
    cls: type, kwargs: dict[str, Any], field: str
) -> None:
    assert attrs.has(cls)
    instance = cls(**kwargs)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(instance, field, "changed")
    assert instance == cls(**kwargs)
    hash(instance)  # usable as a dict key / in sets


@pytest.mark.parametrize(
    ("cls", "kwargs", "field"), FROZEN, ids=[cls.__name__ for cls, _, _ in FROZEN]
)
def test_value_types_pickle_and_copy(cls: type, kwargs: dict[str, Any], field: str) -> None:
    """Values cross processes (Ray, multiprocessing) and are copied whole."""
    instance = cls(**kwargs)
    for copied in (
        pickle.loads(pickle.dumps(instance)),
        copy.deepcopy(instance),
        copy.copy(instance),
    ):
        assert copied == instance
        assert type(copied) is cls
        assert hash(copied) == hash(instance)


@pytest.mark.parametrize("make", [ts.Client, ts.AsyncClient])
def test_a_client_refuses_to_be_pickled_or_copied(make: Any) -> None:
    """A copy would share the connections: closing it would close the original's."""
    client = make("grpc://127.0.0.1:1")
    for copier in (pickle.dumps, copy.copy, copy.deepcopy):
        with pytest.raises(TypeError, match=f"^{make.__name__} cannot be pickled or copied"):
            copier(client)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_model_handle_refuses_to_be_pickled_or_copied_naming_itself(mode: str) -> None:
    # Pickling one said "a Client cannot be pickled", and copy.copy made a copy.
    spec = ts.ModelSpec(name="m", inputs={}, outputs={})
    kind = ts.Client if mode == "sync" else ts.AsyncClient
    client = kind("grpc://test", transport=MockTransport(models=[spec]))
    model = await resolve(client.model("m"))
    for copier in (pickle.dumps, copy.copy, copy.deepcopy):
        with pytest.raises(
            TypeError, match=rf"^a model handle \({type(model).__name__}\) cannot be"
        ):
            copier(model)


def test_importing_the_package_imports_no_network_library() -> None:
    # grpc and aiohttp are imported when a client of that protocol is made, not before.
    code = (
        "import sys, triton_sdk, triton_sdk.testing; "
        "print(sorted(m for m in ('grpc', 'aiohttp', 'tritonclient') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, triton_sdk as ts; ts.Client('localhost:1');"
            "print('grpc' in sys.modules, 'aiohttp' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert made.stdout.split() == ["True", "False"]


def test_constructors_take_arguments_as_the_api_writes_them() -> None:
    spec = ts.TensorSpec("TEXT", datatype="BYTES", shape=(1,))
    assert (spec.name, spec.datatype, spec.shape, spec.optional) == ("TEXT", "BYTES", (1,), False)
    assert ts.RetryPolicy(5, 0.2) == ts.RetryPolicy(max_attempts=5, initial_backoff=0.2)
    assert ts.RetryPolicy() == ts.RetryPolicy(3, 0.1, 5.0, 2.0, True, None)


PUBLIC_MODULES = [
    "triton_sdk",
    "triton_sdk.local",
    "triton_sdk.llm",
    "triton_sdk.ops",
    "triton_sdk.testing",
    "triton_sdk.otel",
    "triton_sdk.stubs",
]


def _undocumented() -> list[str]:
    """Public classes, functions and methods of the package without a docstring of their
    own (a method inherited from outside the package, e.g. attrs' or object's, aside)."""
    import importlib

    missing = []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", []):
            thing = getattr(module, name)
            if not (inspect.isclass(thing) or inspect.isfunction(thing)):
                continue
            if not (getattr(thing, "__module__", "") or "").startswith("triton_sdk"):
                continue
            if not inspect.getdoc(thing):
                missing.append(f"{module_name}.{name}")
            if not inspect.isclass(thing):
                continue
            for attribute, member in vars(thing).items():
                if attribute.startswith("_"):
                    continue
                function = (
                    member.__func__ if isinstance(member, classmethod | staticmethod) else member
                )
                function = function.fget if isinstance(function, property) else function
                if not inspect.isfunction(function) or function.__doc__:
                    continue
                # An override keeps the docstring of what it overrides.
                inherited = [
                    inspect.getdoc(getattr(base, attribute, None))
                    for base in thing.__mro__[1:]
                    if attribute in vars(base)
                ]
                if not any(inherited):
                    missing.append(f"{module_name}.{name}.{attribute}")
    return missing


def test_every_public_class_function_and_method_has_a_docstring() -> None:
    assert _undocumented() == []
