"""Client URLs, the retry policy, TLS files, the NOT_GIVEN sentinel and client settings."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import attrs
import pytest

import triton_sdk as ts
from triton_sdk._base import ClientSettings
from triton_sdk._config import NOT_GIVEN, NotGiven, RetryPolicy, TLSConfig, parse_url
from triton_sdk._transports._own_url import OwnTLS


@pytest.mark.parametrize(
    ("url", "protocol", "tls", "host", "port", "base_path"),
    [
        ("localhost:8001", "grpc", False, "localhost", 8001, ""),
        ("localhost", "grpc", False, "localhost", 8001, ""),
        ("10.0.0.5:9001", "grpc", False, "10.0.0.5", 9001, ""),
        ("grpc://triton", "grpc", False, "triton", 8001, ""),
        ("grpc://triton:7001", "grpc", False, "triton", 7001, ""),
        ("grpcs://triton", "grpc", True, "triton", 443, ""),
        ("grpcs://triton:8443", "grpc", True, "triton", 8443, ""),
        ("http://triton", "http", False, "triton", 80, ""),
        ("http://localhost:8000", "http", False, "localhost", 8000, ""),
        ("https://triton", "http", True, "triton", 443, ""),
        ("https://triton:8443", "http", True, "triton", 8443, ""),
        ("http://[::1]:8000", "http", False, "::1", 8000, ""),
        ("grpc://[::1]:8001", "grpc", False, "::1", 8001, ""),
        ("[::1]:8001", "grpc", False, "::1", 8001, ""),
        ("http://proxy:8080/triton", "http", False, "proxy", 8080, "/triton"),
        ("https://proxy/a/b/", "http", True, "proxy", 443, "/a/b"),
        ("http://triton:8000/", "http", False, "triton", 8000, ""),
        ("HTTP://Triton:8000", "http", False, "triton", 8000, ""),
        ("  localhost:8001  ", "grpc", False, "localhost", 8001, ""),
    ],
)
def test_parse_url(
    url: str, protocol: str, tls: bool, host: str, port: int, base_path: str
) -> None:
    endpoint = parse_url(url)
    assert endpoint.protocol == protocol
    assert endpoint.tls is tls
    assert endpoint.host == host
    assert endpoint.port == port
    assert endpoint.base_path == base_path


@pytest.mark.parametrize(
    ("url", "normalised", "authority"),
    [
        ("localhost:8001", "grpc://localhost:8001", "localhost:8001"),
        ("grpcs://triton", "grpcs://triton:443", "triton:443"),
        ("http://[::1]:8000", "http://[::1]:8000", "[::1]:8000"),
        ("https://proxy/triton/", "https://proxy:443/triton", "proxy:443"),
    ],
)
def test_endpoint_str_and_authority(url: str, normalised: str, authority: str) -> None:
    endpoint = parse_url(url)
    assert str(endpoint) == normalised
    assert endpoint.authority == authority
    assert parse_url(str(endpoint)) == endpoint


@pytest.mark.parametrize(
    "url",
    [
        "ftp://triton:21",
        "unix:///run/triton.sock",
        "ws://triton:8000",
        "grpc://triton:8001/path",
        "grpcs://triton/v2",
        "http://triton:8000?model=x",
        "http://triton:8000/base?x=1",
        "http://triton:8000#frag",
        "http://:8000",
        "grpc://",
        "http://triton:port",
        "http://triton:70000",
    ],
)
def test_invalid_urls(url: str) -> None:
    with pytest.raises(ts.InvalidInputError):
        parse_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "grpc://127.0.0.1\x00.evil.example:8001",  # gRPC cut it at the NUL: port 443
        "http://127.0.0.1\x00x:8000",
        "http://[::1]x:80",  # urllib dropped the x
        "http://h x:80",
        "grpc://h\x01:1",
        "grpc://h\x7f:1",
        "grpc://a,b:1",
        "http://h%00:80",
    ],
)
def test_hosts_that_name_no_host_are_refused(url: str) -> None:
    with pytest.raises(ts.InvalidInputError, match="invalid host in URL"):
        parse_url(url)


@pytest.mark.parametrize(
    "url", ["http://my_host.local:8000", "grpc://[fe80::1%25eth0]:1", "grpc://bücher.example:1"]
)
def test_host_names_of_every_kind_are_kept(url: str) -> None:
    assert parse_url(url).host == url.split("//")[1].rsplit(":", 1)[0].strip("[]")


@pytest.mark.parametrize(
    "url", ["grpc://127.0.0.1:0", "http://127.0.0.1:0", "localhost:", "http://[::1]:", "triton:0"]
)
def test_port_zero_or_empty_is_refused_not_replaced_by_the_default(url: str) -> None:
    # urllib reads them as no port: they became 8001 or 80 without a word.
    with pytest.raises(ts.InvalidInputError, match="invalid port in URL"):
        parse_url(url)


@pytest.mark.parametrize(
    "url", ["http://triton:8000/a\tb", "http://tri\nton:8000", "triton:80\r01"]
)
def test_tabs_and_line_breaks_are_refused_not_dropped(url: str) -> None:
    # urlsplit deletes them: /a<TAB>b became /ab.
    with pytest.raises(ts.InvalidInputError, match="a tab or a line break"):
        parse_url(url)


@pytest.mark.parametrize("path", ["/a b", "/a\x01b", "/a\x7fb"])
def test_a_base_path_an_http_request_cannot_carry_is_refused(path: str) -> None:
    # It was refused at each call instead, as a retryable connection failure.
    with pytest.raises(ts.InvalidInputError, match="percent-encode it"):
        parse_url(f"http://triton:8000{path}")
    assert parse_url("http://triton:8000/a%20b").base_path == "/a%20b"


def test_invalid_scheme_message_names_the_choices() -> None:
    with pytest.raises(ts.InvalidInputError, match="grpcs://") as info:
        parse_url("ftp://triton")
    assert "ftp" in str(info.value)


# RetryPolicy


def test_retry_policy_defaults() -> None:
    policy = ts.RetryPolicy()
    assert policy.max_attempts == 3
    assert policy.initial_backoff == 0.1
    assert policy.max_backoff == 5.0
    assert policy.multiplier == 2.0
    assert policy.jitter is True
    assert policy.deadline is None


def test_retry_policy_none() -> None:
    policy = ts.RetryPolicy.none()
    assert isinstance(policy, ts.RetryPolicy)
    assert policy.max_attempts == 1


def test_retry_policy_is_comparable_and_evolvable() -> None:
    assert ts.RetryPolicy(max_attempts=5) == ts.RetryPolicy(max_attempts=5)
    assert attrs.evolve(ts.RetryPolicy(), deadline=2.0).deadline == 2.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"max_attempts": -1},
        {"initial_backoff": -0.1},
        {"max_backoff": -1.0},
        {"multiplier": 0.5},
        {"deadline": 0},
        {"deadline": -1.0},
        {"deadline": float("nan")},
        {"jitter": "no"},
        {"jitter": 0},
    ],
)
def test_retry_policy_validation(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        ts.RetryPolicy(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 1},
        {"initial_backoff": 0.0},
        {"max_backoff": 0.0},
        {"multiplier": 1.0},
        {"deadline": 0.5},
        {"jitter": False},
    ],
)
def test_retry_policy_accepts_boundaries(kwargs: dict[str, float]) -> None:
    ts.RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_backoff_without_jitter_is_exponential_and_capped() -> None:
    policy = RetryPolicy(initial_backoff=0.1, multiplier=2.0, max_backoff=0.5, jitter=False)
    waits = [policy.backoff(number) for number in range(1, 7)]
    assert waits == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5, 0.5])


@pytest.mark.parametrize("deadline", [float("inf"), 1e9, 1e300, 10**400])
def test_a_deadline_past_any_clock_is_none(deadline: float) -> None:
    # As a timeout that large is: gRPC's and the sockets' clocks cannot hold it.
    assert RetryPolicy(deadline=deadline).deadline is None
    assert RetryPolicy(deadline=1e9 - 1).deadline == 1e9 - 1


def test_backoff_after_thousands_of_retries_stays_capped() -> None:
    # multiplier ** n past 1e308 raises OverflowError instead of giving inf.
    policy = RetryPolicy(initial_backoff=0.1, multiplier=2.0, max_backoff=0.5, jitter=False)
    assert policy.backoff(5000) == 0.5
    assert RetryPolicy(initial_backoff=0, max_backoff=0).backoff(5000) == 0.0
    endless = RetryPolicy(initial_backoff=1.0, max_backoff=float("inf"), jitter=False)
    assert endless.backoff(5000) == 1e9  # what time.sleep can still take


def test_backoff_with_multiplier_3() -> None:
    policy = RetryPolicy(initial_backoff=1.0, multiplier=3.0, max_backoff=100.0, jitter=False)
    assert [policy.backoff(n) for n in (1, 2, 3)] == pytest.approx([1.0, 3.0, 9.0])


def test_backoff_with_jitter_is_between_half_and_all_of_the_base() -> None:
    policy = RetryPolicy(initial_backoff=0.1, multiplier=2.0, max_backoff=0.5)
    rand = random.Random(1234)
    for number, base in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.5), (9, 0.5)]:
        waits = [policy.backoff(number, rand) for _ in range(200)]
        assert all(base / 2 <= wait <= base for wait in waits)
        assert len(set(waits)) > 100  # it is random
        assert min(waits) < base * 0.6
        assert max(waits) > base * 0.9


def test_backoff_with_jitter_uses_a_default_random_source() -> None:
    policy = RetryPolicy(initial_backoff=0.2)
    assert all(0.1 <= policy.backoff(1) <= 0.2 for _ in range(50))


def test_backoff_with_seeded_random_is_reproducible() -> None:
    policy = RetryPolicy()
    first = [policy.backoff(n, random.Random(7)) for n in (1, 2, 3)]
    again = [policy.backoff(n, random.Random(7)) for n in (1, 2, 3)]
    assert first == again


# TLSConfig


def test_tls_config_defaults() -> None:
    tls = ts.TLSConfig()
    assert tls.ca_file is None
    assert tls.cert_file is None
    assert tls.key_file is None
    assert tls.server_hostname is None


def test_tls_config_with_client_certificate() -> None:
    tls = ts.TLSConfig(ca_file="ca.pem", cert_file="client.pem", key_file="client.key")
    assert (tls.cert_file, tls.key_file) == ("client.pem", "client.key")


@pytest.mark.parametrize(
    "kwargs", [{"cert_file": "client.pem"}, {"key_file": "client.key", "ca_file": "ca.pem"}]
)
def test_tls_config_needs_cert_and_key_together(kwargs: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="cert_file and key_file"):
        TLSConfig(**kwargs)


@pytest.mark.parametrize("name", ["localhost\x00evil", "bad host\n", "localhost.", "a/b", ""])
def test_a_server_hostname_that_is_no_host_name_is_refused(name: str) -> None:
    # It failed at the first call, as an answer that could not be read (HTTPS), or was cut
    # at the NUL (gRPC); a final '.' passed on some transports and failed on others.
    with pytest.raises(ts.InvalidInputError, match=r"server_hostname .* is not a host name"):
        TLSConfig(server_hostname=name)


@pytest.mark.parametrize("field", ["ca_file", "cert_file", "key_file"])
def test_an_empty_tls_path_is_refused(field: str) -> None:
    # ssl read ca_file="" as the system's roots; gRPC as the working directory.
    others = {"cert_file": "c.pem", "key_file": "k.pem"} if field != "ca_file" else {}
    with pytest.raises(ts.InvalidInputError, match="a TLS file's path is empty"):
        TLSConfig(**{**others, field: ""})


@pytest.mark.parametrize("kind", [ts.Client, ts.AsyncClient])
@pytest.mark.parametrize("url", ["grpc://127.0.0.1:1", "localhost:8001", "http://127.0.0.1:1"])
def test_tls_files_for_a_url_without_tls_are_refused(kind: type, url: str) -> None:
    # They were dropped without a word: the calls (and a token) went out in the clear.
    with pytest.raises(ts.InvalidInputError, match=r"tls= was given, but .* is not a TLS URL"):
        kind(url, tls=TLSConfig(), headers={"authorization": "Bearer t"})


@pytest.mark.parametrize(
    "options",
    [
        {"metrics_url": "https://127.0.0.1:8002/metrics"},
        {"openai_url": "https://127.0.0.1:9000/v1"},
    ],
)
def test_tls_files_for_a_side_url_with_tls_are_kept(options: dict[str, str]) -> None:
    with ts.Client("grpc://127.0.0.1:1", tls=TLSConfig(), **options) as client:
        assert client._settings.tls == TLSConfig()


def test_tls_config_is_frozen() -> None:
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        ts.TLSConfig().ca_file = "x"  # type: ignore[misc]


# NOT_GIVEN


def test_not_given() -> None:
    assert ts.NOT_GIVEN is NOT_GIVEN
    assert ts.NOT_GIVEN is NotGiven.NOT_GIVEN
    assert isinstance(ts.NOT_GIVEN, ts.NotGiven)
    assert not ts.NOT_GIVEN
    assert bool(ts.NOT_GIVEN) is False
    assert repr(ts.NOT_GIVEN) == "NOT_GIVEN"
    assert ts.NOT_GIVEN is not None
    assert list(ts.NotGiven) == [ts.NOT_GIVEN]


# Client settings: what Client(url, timeout=..., retry=...) resolves


def settings(**overrides: object) -> ClientSettings:
    kwargs: dict[str, object] = {
        "timeout": 30.0,
        "retry": None,
        "headers": None,
        "tls": None,
        "metrics_url": None,
    }
    kwargs.update(overrides)
    return ClientSettings.create("localhost:8001", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [0, -1.0])
def test_client_timeout_must_be_positive(timeout: float) -> None:
    with pytest.raises(ts.InvalidInputError):
        settings(timeout=timeout)


def test_client_settings() -> None:
    resolved = settings(headers={"authorization": "Bearer x"}, retry=ts.RetryPolicy())
    assert resolved.endpoint == parse_url("localhost:8001")
    assert resolved.headers == {"authorization": "Bearer x"}
    assert resolved.retry == ts.RetryPolicy()
    assert settings(retry=None).retry == ts.RetryPolicy.none()
    assert settings(timeout=None).timeout is None


@pytest.mark.parametrize("interval", [0.0001, 1e-6])
def test_a_resolve_interval_too_short_is_refused(interval: float) -> None:
    # 1e-6 had the upkeep thread resolve the name 80,000 times a second.
    with pytest.raises(ts.InvalidInputError, match=r"resolve_interval is at least 0\.05 s"):
        ts.Client("dns:///triton:8001", resolver=lambda _: ["127.0.0.1"], resolve_interval=interval)


@pytest.mark.parametrize("option", ["metrics_url", "openai_url"])
def test_the_hosts_of_side_urls_are_checked_too(option: str) -> None:
    for url in ("http://a b:8002/m", "http://h\x00.evil:8002/m", "http://[::1]x:8002/m"):
        with pytest.raises(ts.InvalidInputError, match="invalid host in URL"):
            ts.Client("grpc://127.0.0.1:1", **{option: url})


def test_tls_with_a_dns_url_says_there_is_no_tls_form() -> None:
    with pytest.raises(ts.InvalidInputError, match="has no TLS form"):
        ts.Client("dns:///triton:8001", tls=TLSConfig(), resolver=lambda _: ["127.0.0.1"])


def test_a_url_given_as_bytes_is_refused_as_bytes() -> None:
    # It was read as a list of URLs: "url must be a str, got int".
    with pytest.raises(ts.InvalidInputError, match="got b'grpc://a:1'"):
        ts.Client(b"grpc://a:1")  # type: ignore[arg-type]


def test_call_timeout_overrides_the_client_default() -> None:
    resolved = settings(timeout=30.0)
    assert resolved.options(ts.NOT_GIVEN, ts.NOT_GIVEN, None).timeout == 30.0
    assert resolved.options(5.0, ts.NOT_GIVEN, None).timeout == 5.0
    assert resolved.options(None, ts.NOT_GIVEN, None).timeout is None
    with pytest.raises(ts.InvalidInputError):
        resolved.options(0.0, ts.NOT_GIVEN, None)


def test_call_retry_overrides_the_client_policy() -> None:
    resolved = settings(retry=ts.RetryPolicy(max_attempts=7))
    assert resolved.options(ts.NOT_GIVEN, ts.NOT_GIVEN, None).retry.max_attempts == 7
    assert resolved.options(ts.NOT_GIVEN, ts.RetryPolicy.none(), None).retry.max_attempts == 1


def test_call_headers_go_on_top_of_the_client_headers() -> None:
    resolved = settings(headers={"X-Token": "client", "x-keep": "1"})
    assert resolved.options(ts.NOT_GIVEN, ts.NOT_GIVEN, None).headers is resolved.headers
    merged = resolved.options(ts.NOT_GIVEN, ts.NOT_GIVEN, {"x-token": "call"}).headers
    assert merged == {"x-keep": "1", "x-token": "call"}
    with pytest.raises(ts.InvalidInputError, match="header"):
        resolved.options(ts.NOT_GIVEN, ts.NOT_GIVEN, {"x-a": "line\nbreak"})


def test_the_retry_deadline_starts_when_the_call_does() -> None:
    resolved = settings(retry=ts.RetryPolicy(deadline=2.0))
    before = time.monotonic()
    deadline_at = resolved.options(ts.NOT_GIVEN, ts.NOT_GIVEN, None).deadline_at
    assert deadline_at is not None
    assert before + 2.0 <= deadline_at <= time.monotonic() + 2.0
    assert settings().options(ts.NOT_GIVEN, ts.NOT_GIVEN, None).deadline_at is None


@pytest.mark.parametrize(
    ("url", "metrics_url"),
    [
        ("localhost:8001", "http://localhost:8002/metrics"),
        ("http://triton.internal:8000", "http://triton.internal:8002/metrics"),
        ("grpcs://triton.example.com", "https://triton.example.com:8002/metrics"),
        ("[::1]:8001", "http://[::1]:8002/metrics"),
    ],
)
def test_metrics_url_defaults_to_port_8002_of_the_same_host(url: str, metrics_url: str) -> None:
    resolved = ClientSettings.create(
        url, timeout=None, retry=None, headers=None, tls=None, metrics_url=None
    )
    assert resolved.metrics_url == metrics_url


def test_metrics_url_can_be_given() -> None:
    assert settings(metrics_url="http://elsewhere:9000/m").metrics_url == "http://elsewhere:9000/m"


@pytest.mark.parametrize(
    ("path", "refusal"),
    [
        ("/met rics", "percent-encode it"),
        ("/m\x01", "percent-encode it"),
        ("/métrics", "beyond ASCII"),
        ("/met\nrics", "a tab or a line break"),
    ],
)
def test_a_metrics_url_an_http_request_cannot_carry_is_refused(path: str, refusal: str) -> None:
    # (The blocking transports retried it as a connection failure or read it as an
    # unreadable answer; asyncio sent it percent-encoded.)
    with pytest.raises(ts.InvalidInputError, match=refusal):
        settings(metrics_url=f"http://elsewhere:9000{path}")
    with pytest.raises(ts.InvalidInputError, match=refusal):
        parse_url(f"http://triton:8000{path}")


@pytest.mark.parametrize(
    "headers",
    [
        {"bad key": "v"},
        {"": "v"},
        {"x-key": "line\nbreak"},
        {"x-key": "carriage\rreturn"},
        {"x-key": "a\ttab"},  # gRPC metadata cannot carry one
        {"x-key": "ü"},
        {"x-key": 5},
        {"x-key": " space before"},
        {"x-key": "space after "},
        {"x-a": "a" * 3600, "x-b": "b" * 3600},
    ],
)
def test_headers_that_a_protocol_cannot_carry_are_refused(headers: dict[str, object]) -> None:
    with pytest.raises(ts.InvalidInputError, match="header"):
        settings(headers=headers)


def test_header_values_are_not_shown_in_errors() -> None:
    with pytest.raises(ts.InvalidInputError) as caught:
        settings(headers={"authorization": "Bearer secret\n"})
    assert "secret" not in str(caught.value)


def test_good_headers_are_kept() -> None:
    headers = {"authorization": "Bearer abc.def", "X-Request-Source": "batch job 7"}
    assert settings(headers=headers).headers == headers


def test_header_names_that_differ_only_in_case_are_sent_once_the_last_given() -> None:
    assert settings(headers={"x-dup": "1", "X-Other": "o", "X-DUP": "2"}).headers == {
        "X-Other": "o",
        "X-DUP": "2",
    }


def test_a_failed_tls_setup_leaves_no_noise_on_stderr(tmp_path: Path) -> None:
    # The connection pool of a client that failed to load its TLS files is collected
    # without "Exception ignored in ... __del__".
    missing = str(tmp_path / "no.pem")
    code = (
        "import gc, triton_sdk as ts\n"
        "try:\n"
        f"    ts.Client('https://127.0.0.1:1', tls=ts.TLSConfig(ca_file={missing!r}))\n"
        "except ts.InvalidInputError:\n"
        "    pass\n"
        "gc.collect()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stderr == ""


def test_server_hostname_holds_for_urls_of_its_own_on_the_clients_hosts_only() -> None:
    # A frontend on another host has a certificate of its own, checked against that host.
    tls = ts.TLSConfig(ca_file=None, server_hostname="triton.test")
    own = OwnTLS(tls, lambda: ("10.0.0.7",))
    assert own("https://10.0.0.7:8002/metrics") is tls
    elsewhere = own("https://frontend.example/v1")
    assert elsewhere is not None
    assert elsewhere.server_hostname is None
    assert OwnTLS(None, lambda: ())("https://frontend.example/v1") is None
