"""Typed answers of the operator's calls: statistics, metrics, trace and log settings."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs
import numpy as np

from ._checks import check_version, numpy_number, shown
from ._display import Displayable, Table
from ._errors import InferenceError, InvalidInputError
from ._spec import json_int

__all__ = [
    "BatchStatistics",
    "DurationStatistics",
    "InferenceStatistics",
    "LogSettings",
    "ModelMetrics",
    "ModelStatistics",
    "ServerMetrics",
    "TraceSettings",
    "log_updates",
    "trace_updates",
]


@attrs.frozen(kw_only=True)
class DurationStatistics:
    """How many times something happened, and the time it took in all."""

    count: int = 0
    total_ns: int = 0

    @property
    def mean_ms(self) -> float:
        """Mean duration in milliseconds (0 when it never happened)."""
        return self.total_ns / self.count / 1e6 if self.count else 0.0

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> DurationStatistics:
        """From the server's JSON answer (gRPC answers are read as their JSON form)."""
        data = data or {}
        return cls(count=json_int(data.get("count")), total_ns=json_int(data.get("ns")))


@attrs.frozen(kw_only=True)
class InferenceStatistics:
    """Cumulative counts and durations of a model's requests, by phase.

    ``success``/``fail`` cover whole requests; ``queue`` the time waiting for an
    instance; ``compute_input``/``compute_infer``/``compute_output`` the model's work.
    """

    success: DurationStatistics = DurationStatistics()
    fail: DurationStatistics = DurationStatistics()
    queue: DurationStatistics = DurationStatistics()
    compute_input: DurationStatistics = DurationStatistics()
    compute_infer: DurationStatistics = DurationStatistics()
    compute_output: DurationStatistics = DurationStatistics()
    cache_hit: DurationStatistics = DurationStatistics()
    cache_miss: DurationStatistics = DurationStatistics()

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> InferenceStatistics:
        """From the server's JSON answer (gRPC answers are read as their JSON form)."""
        data = data or {}
        return cls(
            **{
                field.name: DurationStatistics.from_json(data.get(field.name))
                for field in attrs.fields(cls)
            }
        )


@attrs.frozen(kw_only=True)
class BatchStatistics:
    """How often the model ran with one batch size, and how long that took."""

    batch_size: int
    compute_input: DurationStatistics = DurationStatistics()
    compute_infer: DurationStatistics = DurationStatistics()
    compute_output: DurationStatistics = DurationStatistics()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BatchStatistics:
        """From the server's JSON answer (gRPC answers are read as their JSON form)."""
        return cls(
            batch_size=json_int(data.get("batch_size")),
            compute_input=DurationStatistics.from_json(data.get("compute_input")),
            compute_infer=DurationStatistics.from_json(data.get("compute_infer")),
            compute_output=DurationStatistics.from_json(data.get("compute_output")),
        )


@attrs.frozen(kw_only=True)
class ModelStatistics(Displayable):
    """The server's statistics of one model version since it was loaded.

    Attributes:
        name: the model.
        version: the version.
        last_inference: when it last ran, in milliseconds since the epoch (0: never).
        inference_count: samples inferred (a batch of 8 counts 8).
        execution_count: model executions (a dynamic batch counts 1).
        inference: requests' counts and durations by phase.
        batches: executions by batch size.
    """

    name: str
    version: str
    last_inference: int = 0
    inference_count: int = 0
    execution_count: int = 0
    inference: InferenceStatistics = InferenceStatistics()
    batches: tuple[BatchStatistics, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelStatistics:
        """From the server's JSON answer (gRPC answers are read as their JSON form)."""
        return cls(
            name=str(data.get("name", "")),
            version=str(data.get("version", "")),
            last_inference=json_int(data.get("last_inference")),
            inference_count=json_int(data.get("inference_count")),
            execution_count=json_int(data.get("execution_count")),
            inference=InferenceStatistics.from_json(data.get("inference_stats")),
            batches=tuple(BatchStatistics.from_json(item) for item in data.get("batch_stats", ())),
        )

    def _table(self) -> Table:
        phases = attrs.asdict(self.inference, recurse=False)
        rows = [
            (phase, str(duration.count), f"{duration.mean_ms:.3f}")
            for phase, duration in phases.items()
            if duration.count
        ]
        rows += [
            (
                f"batch of {batch.batch_size}",
                str(batch.compute_infer.count),
                f"{batch.compute_infer.mean_ms:.3f}",
            )
            for batch in self.batches
        ]
        title = (
            f"{self.name} version {self.version}: {self.inference_count} inferences, "
            f"{self.execution_count} executions"
        )
        return Table(title, ("", "count", "mean ms"), rows)


# Triton metric family -> ModelMetrics field.
_MODEL_FAMILIES: Final = {
    "nv_inference_request_success": "request_success",
    "nv_inference_request_failure": "request_failure",
    "nv_inference_count": "inference_count",
    "nv_inference_exec_count": "execution_count",
    "nv_inference_pending_request_count": "pending_requests",
    "nv_inference_request_duration_us": "request_duration_us",
    "nv_inference_queue_duration_us": "queue_duration_us",
    "nv_inference_compute_input_duration_us": "compute_input_duration_us",
    "nv_inference_compute_infer_duration_us": "compute_infer_duration_us",
    "nv_inference_compute_output_duration_us": "compute_output_duration_us",
}


@attrs.frozen(kw_only=True)
class ModelMetrics:
    """A model version's figures from the server's Prometheus ``/metrics``.

    Counters and durations (microseconds) are cumulative since the model was loaded;
    ``request_failure`` sums every failure reason; ``pending_requests`` is a gauge.
    """

    model: str
    version: str
    request_success: float = 0.0
    request_failure: float = 0.0
    inference_count: float = 0.0
    execution_count: float = 0.0
    pending_requests: float = 0.0
    request_duration_us: float = 0.0
    queue_duration_us: float = 0.0
    compute_input_duration_us: float = 0.0
    compute_infer_duration_us: float = 0.0
    compute_output_duration_us: float = 0.0


@attrs.frozen(kw_only=True)
class ServerMetrics(Displayable):
    """The server's ``/metrics``: per-model figures, and every server-wide sample.

    Attributes:
        models: one entry per model version that has metrics.
        server: every other sample, by name: those without a model label (CPU, memory,
            pinned memory...) and the per-model families that are no field of
            :class:`ModelMetrics` (histograms, summaries, cache figures); labelled ones
            (per GPU, per model) as ``name{label="value"}``.
    """

    models: tuple[ModelMetrics, ...] = ()
    server: Mapping[str, float] = attrs.field(factory=dict, hash=False)  # (a dict)

    def _table(self) -> Table:
        rows = [
            (
                entry.model,
                entry.version,
                f"{entry.request_success:g}",
                f"{entry.request_failure:g}",
                f"{entry.inference_count:g}",
                f"{entry.execution_count:g}",
                f"{entry.pending_requests:g}",
            )
            for entry in self.models
        ]
        header = ("model", "version", "success", "failure", "inferences", "executions", "pending")
        title = (
            f"ServerMetrics: {len(self.models)} model versions, {len(self.server)} server samples"
        )
        return Table(title, header, rows)

    def model(self, name: str, version: str | None = None) -> ModelMetrics:
        """The figures of one model (its highest version when none is given)."""
        version = check_version(version)
        matches = [
            entry
            for entry in self.models
            if entry.model == name and (version is None or entry.version == version)
        ]
        if not matches:
            versions = sorted(
                (entry.version for entry in self.models if entry.model == name), key=_version_key
            )
            if versions and version is not None:
                raise InvalidInputError(
                    f"the metrics have no version {version!r} of model {name!r} (they have "
                    f"{', '.join(map(repr, versions))})"
                )
            raise InvalidInputError(f"the metrics have no model {name!r}")
        return max(matches, key=lambda entry: _version_key(entry.version))

    @classmethod
    def from_text(cls, text: str) -> ServerMetrics:
        """Parse the Prometheus text exposition format, with prometheus-client's parser."""
        from prometheus_client.parser import text_string_to_metric_families

        models: dict[tuple[str, str], dict[str, float]] = {}
        server: dict[str, float] = {}
        try:
            families = list(text_string_to_metric_families(text))
        except ValueError as exc:
            raise InferenceError(f"cannot parse the server's metrics: {exc}") from exc
        for family in families:
            # (a counter written as name_total under "# TYPE name counter" is a family of
            # its own to the parser)
            field = _MODEL_FAMILIES.get(family.name.removesuffix("_total"))
            for sample in family.samples:
                model = sample.labels.get("model")
                if model is None or field is None or not _figure(family, sample):
                    server[_sample_key(sample.name, sample.labels)] = float(sample.value)
                    continue
                figures = models.setdefault((model, sample.labels.get("version", "")), {})
                # (per-reason failure samples add up to the model's)
                figures[field] = figures.get(field, 0.0) + float(sample.value)
        return cls(
            models=tuple(
                ModelMetrics(model=model, version=version, **figures)
                for (model, version), figures in sorted(models.items())
            ),
            server=server,
        )


def _figure(family: Any, sample: Any) -> bool:
    """Whether ``sample`` is the figure of a per-model family: its value (a counter's or a
    gauge's), or a summary's or a histogram's sum (its quantiles, buckets and count are
    not the total the field holds)."""
    if family.type in ("summary", "histogram"):
        return bool(sample.name == family.name + "_sum")
    return "quantile" not in sample.labels and "le" not in sample.labels


def _sample_key(name: str, labels: Mapping[str, str]) -> str:
    """``name``, or ``name{label="value",...}`` for labelled samples (per-GPU gauges),
    values escaped as the exposition format escapes them."""
    if not labels:
        return name
    rendered = ",".join(f'{key}="{_escaped(value)}"' for key, value in sorted(labels.items()))
    return f"{name}{{{rendered}}}"


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _version_key(version: str) -> tuple[int, str]:
    return (int(version), "") if version.isdigit() else (-1, version)


def _one(value: Any) -> str:
    if isinstance(value, list | tuple):
        return str(value[0]) if value else ""
    return "" if value is None else str(value)


def _many(value: Any) -> tuple[str, ...]:
    if isinstance(value, list | tuple):
        return tuple(str(item) for item in value)
    return () if value is None else (str(value),)


@attrs.frozen(kw_only=True)
class TraceSettings:
    """Tracing of the server, or of one model (see Triton's trace extension).

    Attributes:
        level: what is traced: ``("OFF",)``, or ``"TIMESTAMPS"`` and/or ``"TENSORS"``.
        rate: one request in ``rate`` is traced.
        count: how many more traces to take (-1: no limit).
        log_frequency: traces per file before a new one is started (0: one file).
        file: where traces are written.
        mode: the trace mode (``"triton"`` or ``"opentelemetry"``).
    """

    level: tuple[str, ...] = ()
    rate: int = 0
    count: int = 0
    log_frequency: int = 0
    file: str = ""
    mode: str = ""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TraceSettings:
        """From the server's JSON answer (gRPC answers are read as their JSON form)."""
        return cls(
            level=_many(data.get("trace_level")),
            rate=int(_one(data.get("trace_rate")) or 0),
            count=int(_one(data.get("trace_count")) or 0),
            log_frequency=int(_one(data.get("log_frequency")) or 0),
            file=_one(data.get("trace_file")),
            mode=_one(data.get("trace_mode")),
        )


def trace_updates(
    *,
    level: Iterable[str] | None,
    rate: int | None,
    count: int | None,
    log_frequency: int | None,
    clear: Iterable[str] | str = (),
) -> dict[str, list[str]]:
    """The settings to send, as the protocol takes them (lists of strings; an empty
    list clears the setting)."""
    updates: dict[str, list[str]] = {}
    cleared = [clear] if isinstance(clear, str) else list(clear)
    unknown_names = [name for name in cleared if name not in _TRACE_SETTING_KEYS]
    if unknown_names:
        raise InvalidInputError(
            f"cannot clear trace setting {', '.join(map(repr, unknown_names))}: the settings "
            f"are {', '.join(map(repr, _TRACE_SETTING_KEYS))}"
        )
    given = {"level": level, "rate": rate, "count": count, "log_frequency": log_frequency}
    both = [name for name in cleared if given[name] is not None]
    if both:
        raise InvalidInputError(
            f"trace setting {', '.join(map(repr, both))} given a value and cleared at once"
        )
    for name in cleared:
        updates[_TRACE_SETTING_KEYS[name]] = []
    if level is not None:
        levels = [level] if isinstance(level, str) else list(level)
        # (the server ignores a level it does not know, and lower case, silently)
        if not levels or not all(isinstance(item, str) for item in levels):
            raise InvalidInputError(f"trace levels are str such as 'TIMESTAMPS', got {level!r}")
        unknown = [item for item in levels if item.upper() not in _TRACE_LEVELS]
        if unknown:
            raise InvalidInputError(
                f"unknown trace level {', '.join(map(repr, unknown))}: the levels are "
                f"{', '.join(map(repr, _TRACE_LEVELS))}"
            )
        updates["trace_level"] = [item.upper() for item in levels]
        if "OFF" in updates["trace_level"] and len(updates["trace_level"]) > 1:
            raise InvalidInputError(  # (the server's refusal, said before sending)
                f"trace level 'OFF' goes alone, got {levels!r}: OFF, or TIMESTAMPS and/or TENSORS"
            )
    # The server reads these as unsigned (rate -5 became 4294967291) numbers, and Triton
    # 2.51 refuses those past int32 (its message says [0, 4294967295]).
    for key, name, value, low, high in (
        ("trace_rate", "rate", rate, 0, 2**31 - 1),
        ("trace_count", "count", count, -1, 2**31 - 1),
        ("log_frequency", "log_frequency", log_frequency, 0, 2**31 - 1),
    ):
        if value is not None:
            updates[key] = [str(_setting_int(name, value, low, high))]
    if not updates:
        raise InvalidInputError("give at least one trace setting to update")
    return updates


_TRACE_LEVELS: Final = ("OFF", "TIMESTAMPS", "TENSORS")
_TRACE_SETTING_KEYS: Final = {
    "level": "trace_level",
    "rate": "trace_rate",
    "count": "trace_count",
    "log_frequency": "log_frequency",
}


def _setting_int(name: str, value: object, low: int, high: int) -> int:
    if numpy_number(value, integer=True):
        value = int(value)
    # bool is an int to Python: a rate given as True is refused.
    if type(value) is not int:
        raise InvalidInputError(
            f"{name} must be of type int, got the {type(value).__name__} {shown(value)}"
        )
    if not low <= value <= high:
        raise InvalidInputError(f"{name} must be in [{low}, {high}], got {value}")
    return value


@attrs.frozen(kw_only=True)
class LogSettings:
    """The server's logging (see Triton's logging extension)."""

    file: str = ""
    info: bool = False
    warning: bool = False
    error: bool = False
    verbose_level: int = 0
    format: str = ""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LogSettings:
        """From the server's JSON answer (gRPC answers are read as their JSON form)."""
        return cls(
            file=str(data.get("log_file") or ""),
            info=bool(data.get("log_info", False)),
            warning=bool(data.get("log_warning", False)),
            error=bool(data.get("log_error", False)),
            verbose_level=json_int(data.get("log_verbose_level")),
            format=str(data.get("log_format") or ""),
        )


def _switch(value: bool | None) -> bool | None:
    """A log switch: a numpy bool is one too, as a numpy int is a level."""
    given: object = value  # (callers without type checking pass numpy bools)
    return bool(given) if isinstance(given, np.bool_) else value


def log_updates(
    *,
    file: str | None,
    info: bool | None,
    warning: bool | None,
    error: bool | None,
    verbose_level: int | None,
    format: str | None,
) -> dict[str, bool | int | str]:
    """The settings to send, typed as the protocol takes them."""
    info, warning, error = (_switch(value) for value in (info, warning, error))
    updates: dict[str, bool | int | str] = {
        key: value
        for key, value in (
            ("log_file", file),
            ("log_info", info),
            ("log_warning", warning),
            ("log_error", error),
            ("log_verbose_level", verbose_level),
            ("log_format", format),
        )
        if value is not None
    }
    if not updates:
        raise InvalidInputError("give at least one log setting to update")
    for name, value, kind in (
        ("file", file, str),
        ("info", info, bool),
        ("warning", warning, bool),
        ("error", error, bool),
        ("format", format, str),
    ):
        # bool is an int to Python: a switch given as 1 is refused.
        if value is not None and (type(value) is not kind):
            raise InvalidInputError(
                f"{name} must be of type {kind.__name__}, got the {type(value).__name__} "
                f"{shown(value)}"
            )
    if verbose_level is not None:  # (the server makes one past int32 0, silently)
        updates["log_verbose_level"] = _setting_int("verbose_level", verbose_level, 0, 2**31 - 1)
    return updates
