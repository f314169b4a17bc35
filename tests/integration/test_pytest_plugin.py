"""The pytest plugin, used by a small test project as a downstream service would use it."""

from __future__ import annotations

import textwrap

import pytest

from .conftest import EXAMPLE_MODELS

pytest_plugins = ["pytester"]

PROJECT_TESTS = """
import numpy as np
import pytest
import triton_sdk as ts


def test_the_server_runs_the_repository(triton_client):
    result = triton_client.model("add_sub").infer(INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1])
    assert result["OUTPUT0"].tolist() == [2, 3, 4, 5]


def test_the_url_is_the_configured_protocol(triton_url, triton_server):
    assert triton_url == triton_server.PROTOCOL_url


async def test_the_async_client(triton_async_client):
    assert await triton_async_client.is_ready()


# The clients read metrics from port 8002 of the host, not from this server's port.
def test_the_client_reads_the_servers_metrics(triton_client):
    triton_client.model("add_sub").infer(INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1])
    assert any(entry.model == "add_sub" for entry in triton_client.metrics().models)


async def test_the_async_client_reads_the_servers_metrics(triton_async_client):
    model = await triton_async_client.model("add_sub")
    await model.infer(INPUT0=[1, 2, 3, 4], INPUT1=[1, 1, 1, 1])
    metrics = await triton_async_client.metrics()
    assert any(entry.model == "add_sub" for entry in metrics.models)


def test_the_mock_needs_no_server(triton_mock):
    triton_mock.handler = lambda op, ctx: {"name": "mocked"}
    with ts.Client("grpc://test", transport=triton_mock) as client:
        assert client.server_metadata().name == "mocked"
"""


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_project_tests_against_a_real_server(pytester: pytest.Pytester, protocol: str) -> None:
    models = pytester.mkdir("models")
    (models / "add_sub").symlink_to(EXAMPLE_MODELS / "add_sub", target_is_directory=True)
    pytester.makeini(
        textwrap.dedent(
            f"""
            [pytest]
            triton_repository = models
            triton_protocol = {protocol}
            asyncio_mode = auto
            """
        )
    )
    pytester.makepyfile(test_service=PROJECT_TESTS.replace("PROTOCOL", protocol))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=6)


def test_without_a_repository_the_server_fixture_says_what_to_set(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_service="def test_it(triton_server):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*set triton_repository in the pytest configuration*"])
    assert result.ret != 0


def test_a_misspelt_protocol_is_said_before_a_server_starts(pytester: pytest.Pytester) -> None:
    # It was said once the session's server had started (seconds, for nothing).
    pytester.makeini("[pytest]\ntriton_repository = no/such/repository\ntriton_protocol = grcp\n")
    pytester.makepyfile(test_service="def test_it(triton_url):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*triton_protocol must be grpc or http, got 'grcp'*"])
    result.stdout.no_fnmatch_line("*no/such/repository*")  # (no server was started)
    assert result.ret != 0


def test_a_repository_on_the_command_line_is_found_from_where_pytest_runs(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeini("[pytest]\n")  # the rootdir, with no models of its own
    service = pytester.mkdir("service")
    (service / "models").mkdir()
    (service / "models" / "add_sub").symlink_to(EXAMPLE_MODELS / "add_sub")
    (service / "test_service.py").write_text(
        "def test_it(triton_client):\n    assert triton_client.is_ready()\n"
    )
    monkeypatch.chdir(service)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--triton-repository", "models"
    )
    result.assert_outcomes(passed=1)


def test_a_project_that_gives_its_own_url_starts_no_server(pytester: pytest.Pytester) -> None:
    # The client fixtures asked for triton_server (for its metrics URL), which wants a
    # model repository, though the project's triton_url names a server of its own.
    pytester.makeconftest(
        textwrap.dedent(
            """
            import pytest

            @pytest.fixture(scope="session")
            def triton_url():
                return "grpc://127.0.0.1:9"
            """
        )
    )
    pytester.makepyfile(
        test_service=textwrap.dedent(
            """
            async def test_async(triton_async_client):
                assert not await triton_async_client.is_live()

            def test_sync(triton_client):
                assert not triton_client.is_live()
            """
        )
    )
    pytester.makeini("[pytest]\nasyncio_mode = auto\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
