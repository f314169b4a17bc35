"""The operator's answers, typed: statistics, Prometheus metrics, trace and log settings."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb

import triton_sdk as ts
from triton_sdk import (
    BatchStatistics,
    DurationStatistics,
    InferenceStatistics,
    LogSettings,
    ModelMetrics,
    ModelStatistics,
    ServerMetrics,
    TraceSettings,
)
from triton_sdk._operations import log_updates, trace_updates

# What a Triton server's /metrics answers, trimmed to two models (one in two versions).
# Failures come with a reason label per cause; they must be summed per model version.
METRICS_TEXT = """\
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="scale",version="1"} 12
nv_inference_request_success{model="scale",version="2"} 30
nv_inference_request_success{model="text_embed",version="1"} 7
# HELP nv_inference_request_failure Number of failed inference requests, all batch sizes
# TYPE nv_inference_request_failure counter
nv_inference_request_failure{model="scale",reason="OTHER",version="1"} 1
nv_inference_request_failure{model="scale",reason="BACKEND",version="1"} 2
nv_inference_request_failure{model="scale",reason="CANCELED",version="1"} 0
nv_inference_request_failure{model="scale",reason="REJECTED",version="1"} 4
nv_inference_request_failure{model="scale",reason="OTHER",version="2"} 0
nv_inference_request_failure{model="scale",reason="BACKEND",version="2"} 3
nv_inference_request_failure{model="scale",reason="CANCELED",version="2"} 0
nv_inference_request_failure{model="scale",reason="REJECTED",version="2"} 0
nv_inference_request_failure{model="text_embed",reason="OTHER",version="1"} 0
nv_inference_request_failure{model="text_embed",reason="BACKEND",version="1"} 0
nv_inference_request_failure{model="text_embed",reason="CANCELED",version="1"} 0
nv_inference_request_failure{model="text_embed",reason="REJECTED",version="1"} 0
# HELP nv_inference_count Number of inferences performed (does not include cached requests)
# TYPE nv_inference_count counter
nv_inference_count{model="scale",version="1"} 40
nv_inference_count{model="scale",version="2"} 96
nv_inference_count{model="text_embed",version="1"} 14
# HELP nv_inference_exec_count Number of model executions performed
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{model="scale",version="1"} 10
nv_inference_exec_count{model="scale",version="2"} 25
nv_inference_exec_count{model="text_embed",version="1"} 7
# HELP nv_inference_request_duration_us Cumulative inference request duration in microseconds
# TYPE nv_inference_request_duration_us counter
nv_inference_request_duration_us{model="scale",version="1"} 35000
nv_inference_request_duration_us{model="scale",version="2"} 91000
nv_inference_request_duration_us{model="text_embed",version="1"} 5200
# HELP nv_inference_queue_duration_us Cumulative inference queuing duration in microseconds
# TYPE nv_inference_queue_duration_us counter
nv_inference_queue_duration_us{model="scale",version="1"} 700
nv_inference_queue_duration_us{model="scale",version="2"} 1500
nv_inference_queue_duration_us{model="text_embed",version="1"} 90
# HELP nv_inference_compute_input_duration_us Cumulative compute input duration in microseconds
# TYPE nv_inference_compute_input_duration_us counter
nv_inference_compute_input_duration_us{model="scale",version="1"} 120
nv_inference_compute_input_duration_us{model="scale",version="2"} 330
nv_inference_compute_input_duration_us{model="text_embed",version="1"} 15
# HELP nv_inference_compute_infer_duration_us Cumulative compute inference duration in microseconds
# TYPE nv_inference_compute_infer_duration_us counter
nv_inference_compute_infer_duration_us{model="scale",version="1"} 33000
nv_inference_compute_infer_duration_us{model="scale",version="2"} 88000
nv_inference_compute_infer_duration_us{model="text_embed",version="1"} 5000
# HELP nv_inference_compute_output_duration_us Cumulative compute output duration in microseconds
# TYPE nv_inference_compute_output_duration_us counter
nv_inference_compute_output_duration_us{model="scale",version="1"} 180
nv_inference_compute_output_duration_us{model="scale",version="2"} 420
nv_inference_compute_output_duration_us{model="text_embed",version="1"} 25
# HELP nv_inference_pending_request_count Instantaneous number of pending requests
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="scale",version="1"} 0
nv_inference_pending_request_count{model="scale",version="2"} 3
nv_inference_pending_request_count{model="text_embed",version="1"} 0
# HELP nv_pinned_memory_pool_total_bytes Pinned memory pool total memory size, in bytes
# TYPE nv_pinned_memory_pool_total_bytes gauge
nv_pinned_memory_pool_total_bytes 268435456
# HELP nv_pinned_memory_pool_used_bytes Pinned memory pool used memory size, in bytes
# TYPE nv_pinned_memory_pool_used_bytes gauge
nv_pinned_memory_pool_used_bytes 0
# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]
# TYPE nv_cpu_utilization gauge
nv_cpu_utilization 0.25
# HELP nv_cpu_memory_total_bytes CPU total memory (RAM), in bytes
# TYPE nv_cpu_memory_total_bytes gauge
nv_cpu_memory_total_bytes 16777216000
# HELP nv_cpu_memory_used_bytes CPU used memory (RAM), in bytes
# TYPE nv_cpu_memory_used_bytes gauge
nv_cpu_memory_used_bytes 4194304000
"""


# ServerMetrics.from_text


@pytest.fixture(scope="module")
def metrics() -> ServerMetrics:
    return ServerMetrics.from_text(METRICS_TEXT)


def test_metrics_have_one_entry_per_model_version(metrics: ServerMetrics) -> None:
    assert sorted((entry.model, entry.version) for entry in metrics.models) == [
        ("scale", "1"),
        ("scale", "2"),
        ("text_embed", "1"),
    ]
    assert all(isinstance(entry, ModelMetrics) for entry in metrics.models)


def test_metrics_fields_of_one_model_version(metrics: ServerMetrics) -> None:
    assert metrics.model("scale", "1") == ModelMetrics(
        model="scale",
        version="1",
        request_success=12,
        request_failure=7,  # OTHER 1 + BACKEND 2 + CANCELED 0 + REJECTED 4
        inference_count=40,
        execution_count=10,
        pending_requests=0,
        request_duration_us=35000,
        queue_duration_us=700,
        compute_input_duration_us=120,
        compute_infer_duration_us=33000,
        compute_output_duration_us=180,
    )


def test_metrics_failures_are_summed_over_reasons_per_version(metrics: ServerMetrics) -> None:
    assert metrics.model("scale", "1").request_failure == 7.0
    assert metrics.model("scale", "2").request_failure == 3.0
    assert metrics.model("text_embed").request_failure == 0.0


def test_metrics_model_without_version_picks_the_highest(metrics: ServerMetrics) -> None:
    latest = metrics.model("scale")
    assert latest.version == "2"
    assert latest.request_success == 30
    assert latest.pending_requests == 3
    assert latest.inference_count == 96


def test_metrics_highest_version_is_numeric_not_lexical() -> None:
    text = (
        "# TYPE nv_inference_count counter\n"
        'nv_inference_count{model="m",version="9"} 1\n'
        'nv_inference_count{model="m",version="10"} 2\n'
    )
    assert ServerMetrics.from_text(text).model("m").version == "10"


def test_metrics_server_wide_gauges(metrics: ServerMetrics) -> None:
    assert metrics.server["nv_cpu_utilization"] == 0.25
    assert metrics.server["nv_pinned_memory_pool_total_bytes"] == 268435456
    assert metrics.server["nv_cpu_memory_used_bytes"] == 4194304000
    # Model samples never leak into the server-wide map.
    assert not any(name.startswith("nv_inference") for name in metrics.server)


def test_metrics_server_keys_escape_label_values_as_the_text_does() -> None:
    text = '# TYPE nv_gpu_utilization gauge\nnv_gpu_utilization{gpu_uuid="a\\"b\\\\c\\nd"} 0.5\n'
    server = ServerMetrics.from_text(text).server
    assert dict(server) == {'nv_gpu_utilization{gpu_uuid="a\\"b\\\\c\\nd"}': 0.5}


def test_metrics_unknown_model_or_version_is_refused(metrics: ServerMetrics) -> None:
    with pytest.raises(ts.InvalidInputError, match="'nope'"):
        metrics.model("nope")
    # It blamed the model for a version it lacks, and took an int for no version at all.
    with pytest.raises(
        ts.InvalidInputError, match="no version '3' of model 'scale' \\(they have '1', '2'\\)"
    ):
        metrics.model("scale", "3")
    with pytest.raises(ts.InvalidInputError, match="version must be a str, got int"):
        metrics.model("scale", 2)  # type: ignore[arg-type]


def test_metrics_unknown_model_families_are_ignored() -> None:
    text = (
        "# TYPE nv_cache_num_hits_per_model counter\n"
        'nv_cache_num_hits_per_model{model="m",version="1"} 5\n'
        "# TYPE nv_inference_count counter\n"
        'nv_inference_count{model="m",version="1"} 2\n'
    )
    parsed = ServerMetrics.from_text(text)
    assert parsed.model("m") == ModelMetrics(model="m", version="1", inference_count=2)
    assert "nv_cache_num_hits_per_model" not in parsed.server


def test_metrics_of_an_empty_text() -> None:
    parsed = ServerMetrics.from_text("")
    assert parsed.models == ()
    assert dict(parsed.server) == {}


@pytest.mark.parametrize(
    "text",
    [
        "this is not prometheus\n",
        "<html><body>502 Bad Gateway</body></html>\n",
        'nv_inference_count{model="m",version="1"} not-a-number\n',
        'nv_inference_count{model="m" 1\n',
    ],
)
def test_malformed_metrics_raise_inference_error(text: str) -> None:
    with pytest.raises(ts.InferenceError, match="metrics"):
        ServerMetrics.from_text(text)


# ModelStatistics.from_json

# What Triton's HTTP endpoint answers: every field present, uint64 as JSON numbers.
HTTP_STATISTICS: dict[str, Any] = {
    "name": "scale",
    "version": "1",
    "last_inference": 1717171717171,
    "inference_count": 6,
    "execution_count": 3,
    "inference_stats": {
        "success": {"count": 3, "ns": 9000000},
        "fail": {"count": 1, "ns": 500000},
        "queue": {"count": 3, "ns": 300000},
        "compute_input": {"count": 3, "ns": 150000},
        "compute_infer": {"count": 3, "ns": 7500000},
        "compute_output": {"count": 3, "ns": 90000},
        "cache_hit": {"count": 0, "ns": 0},
        "cache_miss": {"count": 0, "ns": 0},
    },
    "response_stats": {},
    "batch_stats": [
        {
            "batch_size": 1,
            "compute_input": {"count": 2, "ns": 100000},
            "compute_infer": {"count": 2, "ns": 5000000},
            "compute_output": {"count": 2, "ns": 60000},
        },
        {
            "batch_size": 4,
            "compute_input": {"count": 1, "ns": 50000},
            "compute_infer": {"count": 1, "ns": 2500000},
            "compute_output": {"count": 1, "ns": 30000},
        },
    ],
    "memory_usage": [],
}


def grpc_statistics() -> dict[str, Any]:
    """The same statistics as gRPC's JSON form: uint64 as strings, zero fields left out."""
    message = pb.ModelStatistics()
    json_format.ParseDict(HTTP_STATISTICS, message, ignore_unknown_fields=True)
    data: dict[str, Any] = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return data


def test_grpc_json_form_is_what_the_test_claims() -> None:
    data = grpc_statistics()
    assert data["inference_count"] == "6"
    assert data["inference_stats"]["success"] == {"count": "3", "ns": "9000000"}
    # Zero counts are left out: an empty message, or no message at all.
    assert data["inference_stats"].get("cache_hit", {}) == {}


def test_statistics_from_http_json() -> None:
    stats = ModelStatistics.from_json(HTTP_STATISTICS)
    assert stats.name == "scale"
    assert stats.version == "1"
    assert stats.last_inference == 1717171717171
    assert stats.inference_count == 6
    assert stats.execution_count == 3
    assert stats.inference.success == DurationStatistics(count=3, total_ns=9000000)
    assert stats.inference.fail == DurationStatistics(count=1, total_ns=500000)
    assert stats.inference.compute_infer == DurationStatistics(count=3, total_ns=7500000)
    assert stats.inference.cache_hit == DurationStatistics()
    assert stats.batches == (
        BatchStatistics(
            batch_size=1,
            compute_input=DurationStatistics(count=2, total_ns=100000),
            compute_infer=DurationStatistics(count=2, total_ns=5000000),
            compute_output=DurationStatistics(count=2, total_ns=60000),
        ),
        BatchStatistics(
            batch_size=4,
            compute_input=DurationStatistics(count=1, total_ns=50000),
            compute_infer=DurationStatistics(count=1, total_ns=2500000),
            compute_output=DurationStatistics(count=1, total_ns=30000),
        ),
    )


def test_statistics_from_grpc_json_equal_those_from_http_json() -> None:
    from_grpc = ModelStatistics.from_json(grpc_statistics())
    from_http = ModelStatistics.from_json(HTTP_STATISTICS)
    assert from_grpc == from_http
    assert isinstance(from_grpc.inference_count, int)
    assert isinstance(from_grpc.inference.success.total_ns, int)


def test_statistics_of_a_model_never_run() -> None:
    # gRPC leaves out every zero field: only the name and version remain.
    stats = ModelStatistics.from_json({"name": "m", "version": "1"})
    assert stats == ModelStatistics(name="m", version="1")
    assert stats.inference == InferenceStatistics()
    assert stats.inference.success.count == 0
    assert stats.batches == ()
    assert stats.inference.success.mean_ms == 0.0


def test_duration_mean_ms() -> None:
    assert DurationStatistics(count=4, total_ns=10_000_000).mean_ms == pytest.approx(2.5)
    assert DurationStatistics(count=1, total_ns=1).mean_ms == pytest.approx(1e-6)
    assert DurationStatistics(count=0, total_ns=0).mean_ms == 0.0
    assert DurationStatistics(count=0, total_ns=12345).mean_ms == 0.0


def test_duration_from_json_reads_strings_and_missing_fields() -> None:
    assert DurationStatistics.from_json({"count": "2", "ns": "3000000000000"}) == (
        DurationStatistics(count=2, total_ns=3_000_000_000_000)
    )
    assert DurationStatistics.from_json({"count": "2"}) == DurationStatistics(count=2)
    assert DurationStatistics.from_json(None) == DurationStatistics()


# TraceSettings


HTTP_TRACE: dict[str, Any] = {
    "trace_level": ["TIMESTAMPS", "TENSORS"],
    "trace_rate": "1000",
    "trace_count": "-1",
    "log_frequency": "0",
    "trace_file": "traces/trace.json",
    "trace_mode": "triton",
}

# Over gRPC every value is a list of strings.
GRPC_TRACE: dict[str, Any] = {
    "trace_level": ["TIMESTAMPS", "TENSORS"],
    "trace_rate": ["1000"],
    "trace_count": ["-1"],
    "log_frequency": ["0"],
    "trace_file": ["traces/trace.json"],
    "trace_mode": ["triton"],
}


def test_trace_settings_from_http_json() -> None:
    assert TraceSettings.from_json(HTTP_TRACE) == TraceSettings(
        level=("TIMESTAMPS", "TENSORS"),
        rate=1000,
        count=-1,
        log_frequency=0,
        file="traces/trace.json",
        mode="triton",
    )


def test_trace_settings_from_grpc_json_equal_http() -> None:
    assert TraceSettings.from_json(GRPC_TRACE) == TraceSettings.from_json(HTTP_TRACE)


def test_trace_settings_of_a_server_without_tracing() -> None:
    settings = TraceSettings.from_json(
        {
            "trace_level": ["OFF"],
            "trace_rate": "1000",
            "trace_count": "-1",
            "log_frequency": "0",
            "trace_file": "",
            "trace_mode": "triton",
        }
    )
    assert settings.level == ("OFF",)
    assert settings.rate == 1000
    assert settings.count == -1
    assert settings.file == ""
    # gRPC sends an empty list for an unset file; a missing key is empty too.
    assert TraceSettings.from_json({"trace_file": []}).file == ""
    assert TraceSettings.from_json({}) == TraceSettings()


def test_trace_level_given_as_one_string() -> None:
    assert TraceSettings.from_json({"trace_level": "TIMESTAMPS"}).level == ("TIMESTAMPS",)


def test_trace_updates_carry_only_the_given_settings_as_lists_of_strings() -> None:
    assert trace_updates(level=None, rate=50, count=None, log_frequency=None) == {
        "trace_rate": ["50"]
    }
    assert trace_updates(level=None, rate=None, count=-1, log_frequency=3) == {
        "trace_count": ["-1"],
        "log_frequency": ["3"],
    }
    assert trace_updates(level=["TIMESTAMPS", "TENSORS"], rate=1, count=0, log_frequency=0) == {
        "trace_level": ["TIMESTAMPS", "TENSORS"],
        "trace_rate": ["1"],
        "trace_count": ["0"],
        "log_frequency": ["0"],
    }


def test_trace_updates_take_one_level_as_a_string() -> None:
    # A str is an Iterable[str] too: it must not become ["T", "I", "M", ...].
    assert trace_updates(level="TIMESTAMPS", rate=None, count=None, log_frequency=None) == {
        "trace_level": ["TIMESTAMPS"]
    }
    assert trace_updates(level=("OFF",), rate=None, count=None, log_frequency=None) == {
        "trace_level": ["OFF"]
    }


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        # The server read these as unsigned: -5 became a rate of 4294967291.
        ("rate", -5, "rate must be in [0, 2147483647], got -5"),
        # Triton 2.51 refused past int32, saying "out of range [ 0, 4294967295 ]".
        ("rate", 2**31, "rate must be in [0, 2147483647], got 2147483648"),
        ("rate", 1.5, "rate must be of type int, got the float 1.5"),
        ("rate", True, "rate must be of type int, got the bool True"),
        ("count", -2, "count must be in [-1, 2147483647], got -2"),
        ("log_frequency", -1, "log_frequency must be in [0, 2147483647], got -1"),
        ("log_frequency", 2**31, "log_frequency must be in [0, 2147483647], got 2147483648"),
        # The server ignored a level it did not know.
        ("level", "BOGUS", "unknown trace level 'BOGUS': the levels are 'OFF', 'TIMESTAMPS'"),
        ("level", [], "trace levels are str such as 'TIMESTAMPS', got []"),
    ],
)
def test_a_trace_setting_the_server_would_misread_is_refused(
    setting: str, value: object, message: str
) -> None:
    given: dict[str, Any] = dict.fromkeys(("level", "rate", "count", "log_frequency"))
    given[setting] = value
    with pytest.raises(ts.InvalidInputError, match=re.escape(message)):
        trace_updates(**given)


def test_numpy_integers_are_taken_as_settings() -> None:
    updates = trace_updates(level=None, rate=np.int64(100), count=np.int32(-1), log_frequency=None)
    assert updates == {"trace_rate": ["100"], "trace_count": ["-1"]}


def test_off_with_another_trace_level_is_refused_before_sending() -> None:
    # The server refused it ("Expect only one trace level 'OFF' is specified").
    for levels in (("OFF", "TIMESTAMPS"), ("OFF", "off")):  # (the server refuses OFF twice too)
        with pytest.raises(ts.InvalidInputError, match="trace level 'OFF' goes alone"):
            trace_updates(level=levels, rate=None, count=None, log_frequency=None)


def test_numpy_bools_are_log_switches() -> None:
    # np.int64 was a level, np.bool_ was refused as "the bool_ True".
    updates = log_updates(
        file=None, info=np.bool_(True), warning=None, error=np.bool_(False), verbose_level=None,
        format=None,
    )  # fmt: skip
    assert updates == {"log_info": True, "log_error": False}
    assert all(type(value) is bool for value in updates.values())


def test_trace_levels_are_sent_in_upper_case() -> None:
    # The server ignores "timestamps" silently.
    assert trace_updates(
        level=["timestamps", "Tensors"], rate=None, count=None, log_frequency=None
    ) == {"trace_level": ["TIMESTAMPS", "TENSORS"]}


def test_trace_updates_keep_zero_values() -> None:
    # 0 is a setting (e.g. log_frequency 0: one file), not "not given".
    assert trace_updates(level=None, rate=None, count=None, log_frequency=0) == {
        "log_frequency": ["0"]
    }


def test_empty_trace_update_is_refused() -> None:
    with pytest.raises(ts.InvalidInputError, match="at least one"):
        trace_updates(level=None, rate=None, count=None, log_frequency=None)


# LogSettings


def test_log_settings_from_json() -> None:
    data = {
        "log_file": "",
        "log_info": True,
        "log_warning": True,
        "log_error": False,
        "log_verbose_level": 2,
        "log_format": "ISO8601",
    }
    assert LogSettings.from_json(data) == LogSettings(
        file="", info=True, warning=True, error=False, verbose_level=2, format="ISO8601"
    )


def test_log_settings_from_grpc_json_with_settings_left_out() -> None:
    # gRPC's settings map may lack entries; uint32 may come as a string.
    settings = LogSettings.from_json({"log_info": True, "log_verbose_level": "1"})
    assert settings == LogSettings(info=True, verbose_level=1)
    assert LogSettings.from_json({}) == LogSettings()


def test_log_updates_carry_only_the_given_settings_typed() -> None:
    assert log_updates(
        file=None, info=False, warning=None, error=None, verbose_level=None, format=None
    ) == {"log_info": False}
    updates = log_updates(
        file="logs/server.log",
        info=True,
        warning=False,
        error=True,
        verbose_level=0,
        format="default",
    )
    assert updates == {
        "log_file": "logs/server.log",
        "log_info": True,
        "log_warning": False,
        "log_error": True,
        "log_verbose_level": 0,
        "log_format": "default",
    }
    assert type(updates["log_verbose_level"]) is int
    assert type(updates["log_info"]) is bool


def test_empty_log_update_is_refused() -> None:
    with pytest.raises(ts.InvalidInputError, match="at least one"):
        log_updates(file=None, info=None, warning=None, error=None, verbose_level=None, format=None)


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("verbose_level", "x", "verbose_level must be of type int, got the str 'x'"),
        ("verbose_level", True, "verbose_level must be of type int, got the bool True"),
        # The server made a level past int32 0.
        ("verbose_level", 2**31, "verbose_level must be in [0, 2147483647], got 2147483648"),
        ("verbose_level", -1, "verbose_level must be in [0, 2147483647], got -1"),
        ("info", 1, "info must be of type bool, got the int 1"),
        ("file", 0, "file must be of type str"),
    ],
)
def test_a_log_setting_of_the_wrong_type_is_refused(
    setting: str, value: object, message: str
) -> None:
    given: dict[str, Any] = dict.fromkeys(
        ("file", "info", "warning", "error", "verbose_level", "format")
    )
    given[setting] = value
    with pytest.raises(ts.InvalidInputError, match=re.escape(message)):
        log_updates(**given)


def test_numpy_ints_are_taken_for_log_and_trace_numbers() -> None:
    # (verbose_level refused np.int64(1), where rate took np.int64(5).)
    updates = log_updates(
        file=None, info=None, warning=None, error=None, verbose_level=np.int64(1), format=None
    )
    assert updates == {"log_verbose_level": 1}
    assert type(updates["log_verbose_level"]) is int
    assert trace_updates(level=None, rate=np.int64(5), count=None, log_frequency=None) == {
        "trace_rate": ["5"]
    }


def test_labelled_server_samples_keep_their_labels() -> None:
    text = (
        "# TYPE nv_gpu_utilization gauge\n"
        'nv_gpu_utilization{gpu_uuid="GPU-a"} 0.5\n'
        'nv_gpu_utilization{gpu_uuid="GPU-b"} 0.75\n'
    )
    server = ts.ServerMetrics.from_text(text).server
    assert server == {
        'nv_gpu_utilization{gpu_uuid="GPU-a"}': 0.5,
        'nv_gpu_utilization{gpu_uuid="GPU-b"}': 0.75,
    }


def test_metric_families_of_other_shapes_are_read_and_none_is_lost() -> None:
    # A summary's quantile, sum and count were added into one field (87 for a sum of 70),
    # a counter written as name_total read as 0, and per-model families that are no field
    # (histograms) were dropped.
    text = """\
# TYPE nv_inference_count counter
nv_inference_count_total{model="m",version="1"} 3
# TYPE nv_inference_request_duration_us summary
nv_inference_request_duration_us{model="m",version="1",quantile="0.5"} 7
nv_inference_request_duration_us_sum{model="m",version="1"} 70
nv_inference_request_duration_us_count{model="m",version="1"} 10
# TYPE nv_inference_first_response_histogram_ms histogram
nv_inference_first_response_histogram_ms_bucket{model="m",version="1",le="+Inf"} 4
nv_inference_first_response_histogram_ms_sum{model="m",version="1"} 12
nv_inference_first_response_histogram_ms_count{model="m",version="1"} 4
"""
    metrics = ServerMetrics.from_text(text)
    figures = metrics.model("m")
    assert (figures.inference_count, figures.request_duration_us) == (3.0, 70.0)
    assert (
        metrics.server['nv_inference_first_response_histogram_ms_sum{model="m",version="1"}'] == 12
    )
    assert metrics.server['nv_inference_request_duration_us_count{model="m",version="1"}'] == 10
