"""TLS: gRPC against a real server that serves it (tritonserver --grpc-use-ssl), and HTTPS
through a TLS-terminating relay in front of the real server's HTTP port.

Certificates are made for the test with openssl: a certificate authority, and a server
certificate for the name ``triton.test`` only, so that the name check is exercised too.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import socketserver
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import triton_sdk as ts
from triton_sdk.local import LocalServer

from .conftest import EXAMPLE_MODELS
from .openai_standin import OpenAIStandIn
from .test_llm import MESSAGES, TEMPLATE

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _authority(folder: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", "-subj", f"/CN={name}",
        cwd=folder,
    )  # fmt: skip


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tls")
    _authority(folder, "ca")
    _authority(folder, "other-ca")
    (folder / "san.cnf").write_text("subjectAltName=DNS:triton.test\n")
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
        "-out", "server.csr", "-subj", "/CN=triton.test",
        cwd=folder,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "san.cnf", "-out", "server.pem",
        cwd=folder,
    )  # fmt: skip
    # A client certificate from the server's authority, and one from another.
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "client.key",
        "-out", "client.csr", "-subj", "/CN=client",
        cwd=folder,
    )  # fmt: skip
    # A certificate for 127.0.0.1 itself (a relay in front of the OpenAI stand-in).
    (folder / "ip.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "local.key",
        "-out", "local.csr", "-subj", "/CN=127.0.0.1",
        cwd=folder,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", "local.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "ip.cnf", "-out", "local.pem",
        cwd=folder,
    )  # fmt: skip
    # The server's certificate again, expired yesterday.
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "-1", "-extfile", "san.cnf", "-out", "expired.pem",
        cwd=folder,
    )  # fmt: skip
    for authority, name in (("ca", "client.pem"), ("other-ca", "stranger.pem")):
        _openssl(
            "x509", "-req", "-in", "client.csr", "-CA", f"{authority}.pem",
            "-CAkey", f"{authority}.key", "-CAcreateserial", "-days", "2", "-out", name,
            cwd=folder,
        )  # fmt: skip
    return folder


@pytest.fixture(scope="module")
def tls_server(certificates: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    repository = tmp_path_factory.mktemp("tls_repository")
    (repository / "add_sub").symlink_to(EXAMPLE_MODELS / "add_sub", target_is_directory=True)
    arguments = [
        "--grpc-use-ssl=true",
        f"--grpc-server-cert={certificates / 'server.pem'}",
        f"--grpc-server-key={certificates / 'server.key'}",
    ]
    with LocalServer(repository, extra_args=arguments) as server:
        yield f"grpcs://127.0.0.1:{server.grpc_port}"


def _add(model: ts.Model) -> list[float]:
    result = model.infer(INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1])["OUTPUT0"]
    return [float(value) for value in result]


def test_trusted_certificate_with_its_name(tls_server: str, certificates: Path) -> None:
    tls = ts.TLSConfig(ca_file=str(certificates / "ca.pem"), server_hostname="triton.test")
    with ts.Client(tls_server, tls=tls) as client:
        assert client.is_ready()
        assert _add(client.model("add_sub")) == [2, 3, 4, 5]


def test_asyncio_client_over_tls(tls_server: str, certificates: Path) -> None:
    tls = ts.TLSConfig(ca_file=str(certificates / "ca.pem"), server_hostname="triton.test")

    async def run() -> list[float]:
        async with ts.AsyncClient(tls_server, tls=tls) as client:
            model = await client.model("add_sub")
            result = await model.infer(INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1])
            return [float(value) for value in result["OUTPUT0"]]

    assert asyncio.run(run()) == [2, 3, 4, 5]


@pytest.mark.parametrize(
    ("authority", "hostname"),
    [("other-ca.pem", "triton.test"), ("ca.pem", None)],
    ids=["untrusted-authority", "wrong-name"],
)
def test_refused_certificates_are_not_retried(
    tls_server: str,
    certificates: Path,
    caplog: pytest.LogCaptureFixture,
    authority: str,
    hostname: str | None,
) -> None:
    tls = ts.TLSConfig(ca_file=str(certificates / authority), server_hostname=hostname)
    policy = ts.RetryPolicy(max_attempts=5, initial_backoff=0.01)
    caplog.set_level(logging.INFO, logger="triton_sdk")
    with ts.Client(tls_server, tls=tls, retry=policy, timeout=10) as client:
        assert not client.is_live()
        with pytest.raises(ts.TritonConnectionError) as caught:
            client.server_metadata()
    assert caught.value.retryable is False
    assert "retrying" not in caplog.text


# HTTPS: tritonserver serves plain HTTP only, so a TLS-terminating relay (as a
# deployment would put in front of it) carries the bytes to the real server.


class _Relay(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, context: ssl.SSLContext, target: tuple[str, int]) -> None:
        super().__init__(("127.0.0.1", 0), _RelayHandler)
        self.context = context
        self.target = target


class _RelayHandler(socketserver.BaseRequestHandler):
    server: _Relay

    def handle(self) -> None:
        try:
            client = self.server.context.wrap_socket(self.request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        upstream = socket.create_connection(self.server.target)

        def pump(source: socket.socket, sink: socket.socket) -> None:
            try:
                while data := source.recv(65536):
                    sink.sendall(data)
            except OSError:
                pass
            finally:
                sink.close()
                source.close()

        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
        pump(client, upstream)


@pytest.fixture(scope="module")
def https_url(certificates: Path, server: LocalServer) -> Iterator[str]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificates / "server.pem", certificates / "server.key")
    relay = _Relay(context, ("127.0.0.1", server.http_port))
    thread = threading.Thread(target=relay.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{relay.server_address[1]}"
    relay.shutdown()
    relay.server_close()


def test_https_on_both_clients(https_url: str, certificates: Path) -> None:
    tls = ts.TLSConfig(ca_file=str(certificates / "ca.pem"), server_hostname="triton.test")
    with ts.Client(https_url, tls=tls) as client:
        assert _add(client.model("add_sub")) == [2, 3, 4, 5]
        assert client.is_ready()

    async def run() -> list[float]:
        async with ts.AsyncClient(https_url, tls=tls) as client:
            model = await client.model("add_sub")
            result = await model.infer(INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1])
            return [float(value) for value in result["OUTPUT0"]]

    assert asyncio.run(run()) == [2, 3, 4, 5]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_https_with_an_untrusted_certificate_is_not_retried(
    https_url: str, certificates: Path, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    tls = ts.TLSConfig(ca_file=str(certificates / "other-ca.pem"), server_hostname="triton.test")
    policy = ts.RetryPolicy(max_attempts=5, initial_backoff=0.01)
    caplog.set_level(logging.INFO, logger="triton_sdk")

    async def metadata_async() -> None:
        async with ts.AsyncClient(https_url, tls=tls, retry=policy) as client:
            await client.server_metadata()

    def metadata() -> None:
        if mode == "async":
            asyncio.run(metadata_async())
            return
        with ts.Client(https_url, tls=tls, retry=policy) as client:
            client.server_metadata()

    with pytest.raises(ts.TritonConnectionError) as caught:
        metadata()
    assert caught.value.retryable is False
    assert "retrying" not in caplog.text


# Mutual TLS: the server wants a client certificate from its own authority.


@pytest.fixture(scope="module")
def mtls_server(certificates: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    repository = tmp_path_factory.mktemp("mtls_repository")
    (repository / "add_sub").symlink_to(EXAMPLE_MODELS / "add_sub", target_is_directory=True)
    arguments = [
        "--grpc-use-ssl-mutual=true",
        f"--grpc-server-cert={certificates / 'server.pem'}",
        f"--grpc-server-key={certificates / 'server.key'}",
        f"--grpc-root-cert={certificates / 'ca.pem'}",
    ]
    with LocalServer(repository, extra_args=arguments) as server:
        yield f"grpcs://127.0.0.1:{server.grpc_port}"


def _metadata(url: str, tls: ts.TLSConfig | None, mode: str, policy: ts.RetryPolicy) -> str:
    async def metadata_async() -> str:
        async with ts.AsyncClient(url, tls=tls, retry=policy, timeout=10) as client:
            return (await client.server_metadata()).version

    if mode == "async":
        return asyncio.run(metadata_async())
    with ts.Client(url, tls=tls, retry=policy, timeout=10) as client:
        return client.server_metadata().version


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_mutual_tls_with_the_right_client_certificate(
    mtls_server: str, certificates: Path, mode: str
) -> None:
    tls = ts.TLSConfig(
        ca_file=str(certificates / "ca.pem"),
        server_hostname="triton.test",
        cert_file=str(certificates / "client.pem"),
        key_file=str(certificates / "client.key"),
    )
    assert _metadata(mtls_server, tls, mode, ts.RetryPolicy.none())


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("certificate", [None, "stranger.pem"], ids=["none", "other-authority"])
def test_mutual_tls_refusals_are_tls_failures_and_not_retried(
    mtls_server: str,
    certificates: Path,
    caplog: pytest.LogCaptureFixture,
    mode: str,
    certificate: str | None,
) -> None:
    tls = ts.TLSConfig(
        ca_file=str(certificates / "ca.pem"),
        server_hostname="triton.test",
        cert_file=None if certificate is None else str(certificates / certificate),
        key_file=None if certificate is None else str(certificates / "client.key"),
    )
    caplog.set_level(logging.INFO, logger="triton_sdk")
    with pytest.raises(ts.TritonConnectionError, match="TLS failure") as caught:
        _metadata(mtls_server, tls, mode, ts.RetryPolicy(max_attempts=5, initial_backoff=0.01))
    assert caught.value.retryable is False
    assert "retrying" not in caplog.text


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_https_to_a_plain_http_port_is_a_tls_failure_and_not_retried(
    server: LocalServer, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    caplog.set_level(logging.INFO, logger="triton_sdk")
    url = f"https://127.0.0.1:{server.http_port}"
    with pytest.raises(ts.TritonConnectionError, match="TLS failure") as caught:
        _metadata(url, ts.TLSConfig(), mode, ts.RetryPolicy(max_attempts=5, initial_backoff=0.01))
    assert caught.value.retryable is False
    assert "retrying" not in caplog.text


@pytest.mark.parametrize("scheme", ["grpcs", "https"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_unusable_tls_files_are_refused_when_the_client_is_made(
    tmp_path: Path, scheme: str, mode: str
) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")

    async def make_async() -> None:
        ts.AsyncClient(f"{scheme}://127.0.0.1:1", tls=ts.TLSConfig(ca_file=str(junk)))

    def make() -> None:
        if mode == "async":
            asyncio.run(make_async())
        else:
            ts.Client(f"{scheme}://127.0.0.1:1", tls=ts.TLSConfig(ca_file=str(junk)))

    with pytest.raises(ts.InvalidInputError, match=f"TLS files: ca_file {junk}"):
        make()


@pytest.mark.parametrize("scheme", ["grpcs", "https"])
def test_a_missing_tls_file_is_named(tmp_path: Path, scheme: str) -> None:
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    tls = ts.TLSConfig(cert_file=str(cert), key_file=str(key))
    with pytest.raises(ts.InvalidInputError, match=f"cert_file {cert} with key_file {key}"):
        ts.Client(f"{scheme}://127.0.0.1:1", tls=tls)


@pytest.mark.parametrize("url_of", ["tls_server", "https_url"])
def test_waiting_for_a_server_whose_certificate_fails_raises_at_once(
    url_of: str, request: pytest.FixtureRequest, certificates: Path, mode: str
) -> None:
    # (It polled until the timeout, then said "not ready", the TLS failure lost.)
    url = request.getfixturevalue(url_of)
    tls = ts.TLSConfig(ca_file=str(certificates / "other-ca.pem"), server_hostname="triton.test")

    async def wait_async() -> None:
        async with ts.AsyncClient(url, tls=tls) as client:
            await client.wait_until_ready(timeout=30)

    def wait() -> None:
        if mode == "async":
            asyncio.run(wait_async())
            return
        with ts.Client(url, tls=tls) as client:
            client.wait_until_ready(timeout=30)

    started = time.monotonic()
    with pytest.raises(ts.TritonConnectionError, match="TLS failure"):
        wait()
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("scheme", ["grpcs", "https"])
def test_a_key_with_a_passphrase_is_refused_rather_than_prompted_for(
    certificates: Path, tmp_path: Path, scheme: str
) -> None:
    # OpenSSL asked for the passphrase on the terminal: making the client waited there
    # (without a terminal: "cannot use the TLS files: [Errno 22] Invalid argument").
    encrypted = tmp_path / "encrypted.key"
    _openssl(
        "pkey", "-in", str(certificates / "client.key"), "-aes256",
        "-passout", "pass:secret", "-out", str(encrypted),
        cwd=tmp_path,
    )  # fmt: skip
    tls = ts.TLSConfig(
        ca_file=str(certificates / "ca.pem"),
        cert_file=str(certificates / "client.pem"),
        key_file=str(encrypted),
    )
    with pytest.raises(ts.InvalidInputError, match="is encrypted"):
        ts.Client(f"{scheme}://127.0.0.1:1", tls=tls)


@pytest.fixture(scope="module")
def expired_server(certificates: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    repository = tmp_path_factory.mktemp("expired_repository")
    (repository / "add_sub").symlink_to(EXAMPLE_MODELS / "add_sub", target_is_directory=True)
    arguments = [
        "--grpc-use-ssl=true",
        f"--grpc-server-cert={certificates / 'expired.pem'}",
        f"--grpc-server-key={certificates / 'server.key'}",
    ]
    with LocalServer(repository, extra_args=arguments) as server:
        yield f"grpcs://127.0.0.1:{server.grpc_port}"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_expired_server_certificate_is_a_tls_failure_and_not_retried(
    expired_server: str, certificates: Path, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    tls = ts.TLSConfig(ca_file=str(certificates / "ca.pem"), server_hostname="triton.test")
    caplog.set_level(logging.INFO, logger="triton_sdk")
    with pytest.raises(ts.TritonConnectionError, match="expired") as caught:
        _metadata(expired_server, tls, mode, ts.RetryPolicy(max_attempts=5, initial_backoff=0.01))
    assert caught.value.retryable is False
    assert "retrying" not in caplog.text


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("mismatch", ["grpc-to-tls", "grpc-to-http", "grpcs-to-http"])
def test_protocol_mismatches_on_grpc_say_so_and_are_not_retried(
    tls_server: str,
    server: LocalServer,
    caplog: pytest.LogCaptureFixture,
    mode: str,
    mismatch: str,
) -> None:
    url = {
        "grpc-to-tls": tls_server.replace("grpcs://", "grpc://"),
        "grpc-to-http": f"grpc://127.0.0.1:{server.http_port}",
        "grpcs-to-http": f"grpcs://127.0.0.1:{server.http_port}",
    }[mismatch]
    caplog.set_level(logging.INFO, logger="triton_sdk")
    policy = ts.RetryPolicy(max_attempts=5, initial_backoff=0.01)
    tls = None if url.startswith("grpc://") else ts.TLSConfig()  # (tls= needs a TLS URL)
    with pytest.raises(ts.TritonConnectionError) as caught:
        _metadata(url, tls, mode, policy)
    assert caught.value.retryable is False
    assert "HTTP port" in str(caught.value)
    assert "retrying" not in caplog.text


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_metrics_over_https_check_the_certificate_against_server_hostname(
    certificates: Path, server: LocalServer, mode: str
) -> None:
    # server_hostname was left out of the metrics request: a certificate for
    # triton.test, reached at 127.0.0.1, failed as not valid for 127.0.0.1.
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificates / "server.pem", certificates / "server.key")
    relay = _Relay(context, ("127.0.0.1", server.metrics_port))
    threading.Thread(target=relay.serve_forever, daemon=True).start()
    metrics_url = f"https://127.0.0.1:{relay.server_address[1]}/metrics"
    tls = ts.TLSConfig(ca_file=str(certificates / "ca.pem"), server_hostname="triton.test")
    try:
        if mode == "sync":
            with ts.Client(server.http_url, tls=tls, metrics_url=metrics_url) as client:
                metrics = client.metrics()
        else:

            async def run() -> ts.ServerMetrics:
                async with ts.AsyncClient(
                    server.http_url, tls=tls, metrics_url=metrics_url
                ) as client:
                    return await client.metrics()

            metrics = asyncio.run(run())
    finally:
        relay.shutdown()
        relay.server_close()
    assert metrics.models  # (the session server's models, read over TLS)


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("certificate", ["local", "server"])
def test_the_openai_route_uses_the_clients_tls_files(
    certificates: Path, server: LocalServer, mode: str, certificate: str
) -> None:
    # It made a bare HTTPS connection: a frontend whose certificate only the client's
    # ca_file trusts failed with CERTIFICATE_VERIFY_FAILED; and one for triton.test
    # (server_hostname), reached at 127.0.0.1, was not valid for 127.0.0.1.
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(
        certificates / f"{certificate}.pem", certificates / f"{certificate}.key"
    )
    name = "triton.test" if certificate == "server" else None
    tls = ts.TLSConfig(ca_file=str(certificates / "ca.pem"), server_hostname=name)
    with OpenAIStandIn(server.http_url, TEMPLATE) as standin:
        port = int(standin.url.split(":")[-1].split("/")[0])
        relay = _Relay(context, ("127.0.0.1", port))
        threading.Thread(target=relay.serve_forever, daemon=True).start()
        openai_url = f"https://127.0.0.1:{relay.server_address[1]}/v1"
        try:
            if mode == "sync":
                with ts.Client(server.grpc_url, tls=tls, openai_url=openai_url) as client:
                    answer = client.chat.completions.create(
                        model="llm_vllm", messages=MESSAGES, max_tokens=4, route="openai"
                    )
            else:

                async def run() -> ts.ChatCompletion:
                    async with ts.AsyncClient(
                        server.grpc_url, tls=tls, openai_url=openai_url
                    ) as client:
                        return await client.chat.completions.create(
                            model="llm_vllm", messages=MESSAGES, max_tokens=4, route="openai"
                        )

                answer = asyncio.run(run())
        finally:
            relay.shutdown()
            relay.server_close()
    assert answer.text
    assert standin.received[-1][0] == "/v1/chat/completions"
