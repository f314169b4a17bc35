"""Sessions: tests (unit + integration against a real tritonserver), lint, typecheck.

`python3 -m nox` runs them all; `python3 -m nox -s tests -- -k shaping` runs a subset.
"""

from __future__ import annotations

from pathlib import Path

import nox

nox.options.sessions = ["lint", "typecheck", "docs", "tests", "tests_numpy2", "oip"]
nox.options.error_on_external_run = True
nox.options.reuse_venv = "yes"

TEST_REQUIREMENTS = [
    "pytest>=8",
    "pytest-asyncio>=0.24",
    "pytest-timeout>=2.2",
    "pytest-xdist>=3.6",
    "hypothesis>=6.100",
    "mypy==2.4.1",  # tests/unit/test_stubgen.py type-checks generated modules
    "nbclient>=0.10",  # tests/integration/test_notebook.py runs docs/notebooks
    "nbformat>=5.10",
    "ipykernel>=6.29",
    "opentelemetry-sdk>=1.20",  # tests/integration/test_tracing.py collects spans
    "transformers>=5",  # tests/unit/test_chat_template.py renders as transformers does
    "openai>=1.40",  # the LLM tests validate results against the openai package's types
]


# Two pytest workers, each with its own session server; a file's tests stay on one worker,
# so that a module's servers (a fleet of three, a server of its own) start once. Most of
# the suite waits on servers and sockets rather than the CPU: two workers on two cores
# take about half the time one does.
WORKERS = ["--numprocesses=2", "--dist=loadfile"]


@nox.session
def tests(session: nox.Session) -> None:
    """Unit and integration tests; the server comes from the `server` extra, Ray (for
    tests/integration/test_ray.py) from the `ray` one."""
    # numpy 1 on the client side here (tests_numpy2 has 2); pyarrow from 20 and pandas
    # from 3 need numpy 2.
    requirements = ["numpy>=1.26,<2", "pyarrow<20", "pandas<3", *TEST_REQUIREMENTS]
    session.install(".[server,ray,otel]", *requirements)
    session.run("python", "-m", "triton_sdk", "install-server")
    session.run("pytest", *WORKERS, *session.posargs)


# Tests of what no tensor passes through (many servers, faults, retries, timeouts, TLS,
# server processes and operations, closing, headers, fork, the pytest plugin), and of the
# call shapes built on tensors the other tests cover (LLM chat and completions: text and a
# few integers; typed stubs: wrappers of infer): numpy 2 changes nothing there, and they
# take half the suite's time, so tests_numpy2 leaves them to the tests session.
NUMPY_INDEPENDENT = [
    "tests/integration/test_closing.py",
    "tests/integration/test_fleet.py",
    "tests/integration/test_faults.py",
    "tests/integration/test_fork.py",
    "tests/integration/test_headers.py",
    "tests/integration/test_llm.py",
    "tests/integration/test_local_server.py",
    "tests/integration/test_operations.py",
    "tests/integration/test_retries.py",
    "tests/integration/test_soak.py",
    "tests/integration/test_stubgen.py",
    "tests/integration/test_pytest_plugin.py",
    "tests/integration/test_timeouts.py",
    "tests/integration/test_tls.py",
]


@nox.session
def tests_numpy2(session: nox.Session) -> None:
    """The tests with numpy 2 on the client side, but for those in NUMPY_INDEPENDENT
    (arguments after ``--`` choose the tests instead).

    The server's Python models need numpy 1 (the backend utilities shipped with the
    server mis-decode BYTES tensors under numpy 2): LocalServer makes them an environment
    of their own, here in this session's folder (TRITON_SDK_CACHE), as it would for a user.
    """
    session.install(".[server]", "numpy>=2", *TEST_REQUIREMENTS)
    session.run("python", "-c", "import numpy; assert numpy.__version__.startswith('2.')")
    cache = {"TRITON_SDK_CACHE": str(Path(session.virtualenv.location) / "triton_sdk-cache")}
    session.run("python", "-m", "triton_sdk", "install-server", env=cache)
    chosen = session.posargs or [f"--ignore={path}" for path in NUMPY_INDEPENDENT]
    session.run("pytest", *WORKERS, *chosen, env=cache)


# The Open Inference Protocol servers the oip session runs beside Triton's tests.
OIP_SERVERS = {"mlserver": "mlserver==1.7.1", "kserve": "kserve==0.21.0"}


@nox.session
def oip(session: nox.Session) -> None:
    """The core surface on real MLServer and KServe servers (tests/oip), gRPC and HTTP.

    Each server gets an environment of its own (their pins clash with each other's and
    with the server extra's), made once in this session's folder.
    """
    session.install(".", "pytest>=8", "pytest-asyncio>=0.24", "pytest-timeout>=2.2")
    servers = Path(session.virtualenv.location) / "servers"
    for name, requirement in OIP_SERVERS.items():
        python = servers / name / "bin" / "python"
        if not python.exists():
            session.run("python", "-m", "venv", str(servers / name))
        session.run(str(python), "-m", "pip", "install", "--quiet", requirement, external=True)
    env = {
        "TRITON_SDK_MLSERVER": str(servers / "mlserver" / "bin" / "mlserver"),
        "TRITON_SDK_KSERVE_PYTHON": str(servers / "kserve" / "bin" / "python"),
    }
    session.run("pytest", "tests/oip", *session.posargs, env=env)


@nox.session
def bench(session: nox.Session) -> None:
    """The benchmarks, each printing ratios against raw tritonclient measured side by side.

    Not part of the default sessions: timings are no test. See docs/performance.md.
    """
    session.install(".[server]")
    session.run("python", "bench/overhead.py")
    session.run("python", "bench/large.py")
    session.run("python", "bench/memory.py")
    session.run("python", "bench/threads.py")
    session.run("python", "bench/map.py")
    session.run("python", "bench/fleet.py")
    session.run("python", "bench/bytes.py")


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site (mkdocs, with the API reference from the docstrings),
    built strict: a broken link or reference fails it. Output: site/."""
    session.install("mkdocs>=1.6", "mkdocs-material>=9.5", "mkdocstrings[python]>=0.26")
    session.run(
        "mkdocs", "build", "--strict", "--site-dir", "site", env={"NO_MKDOCS_2_WARNING": "1"}
    )


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check, and the generated blocking client is fresh."""
    session.install("ruff==0.17.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("python", "scripts/unasync.py", "--check")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package and on the usage examples in tests/typing, and pyright's
    check that every public name has a known type (a score below 100 % fails)."""
    # triton_sdk.otel imports opentelemetry, triton_sdk.pytest_plugin pytest.
    session.install(".[otel]", "mypy==2.4.1", "pytest>=8", "basedpyright==1.40.2")
    session.run("mypy", "--strict", "triton_sdk", "tests/typing")
    # verifytypes reads the installed copy, so it runs from outside the checkout.
    session.chdir(session.create_tmp())
    session.run("basedpyright", "--verifytypes", "triton_sdk", "--ignoreexternal")
