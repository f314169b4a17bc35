"""Configuration value objects: retry policy, TLS files, endpoints, the "not given" sentinel."""

from __future__ import annotations

import enum
import random
from collections.abc import Callable
from typing import Any, Final, Literal
from urllib.parse import urlsplit

import attrs

from ._errors import InvalidInputError

__all__ = [
    "NOT_GIVEN",
    "Endpoint",
    "NotGiven",
    "RetryPolicy",
    "TLSConfig",
    "parse_url",
]


class NotGiven(enum.Enum):
    """Marks an option the caller left out, so that ``None`` can mean "off"."""

    NOT_GIVEN = enum.auto()

    def __repr__(self) -> str:
        return "NOT_GIVEN"

    def __bool__(self) -> Literal[False]:
        return False


NOT_GIVEN: Final = NotGiven.NOT_GIVEN

DEFAULT_TIMEOUT: Final = 60.0
"""Seconds each attempt of a call may take unless the client or the call says otherwise."""


def _at_least(minimum: float) -> Callable[[object, attrs.Attribute[Any], float], None]:
    def check(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
        if not value >= minimum:
            raise InvalidInputError(f"{attribute.name} must be >= {minimum}, got {value!r}")

    return check


def _optional_positive(
    instance: object, attribute: attrs.Attribute[float | None], value: float | None
) -> None:
    if value is not None and not value > 0:
        raise InvalidInputError(f"{attribute.name} must be > 0 or None, got {value!r}")


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """How failed calls are repeated.

    Only idempotent calls are retried (health, metadata, stateless inference), and only
    after failures that did not come from the request itself: connection refused or
    reset, gRPC ``UNAVAILABLE`` that is not a TLS or authentication refusal, HTTP 502,
    503 and 504. A timed-out request is never repeated, because the server may still
    run it.

    Attributes:
        max_attempts: attempts in total, the first one included; 1 turns retries off.
        initial_backoff: seconds to wait before the first retry.
        max_backoff: the longest wait between two attempts.
        multiplier: each wait is this many times the previous one, up to ``max_backoff``.
        jitter: wait a random time between half and all of the computed backoff, so
            that many clients do not retry in lockstep.
        deadline: seconds the whole call, retries and waits included, may take;
            ``None`` for no bound beyond ``max_attempts``.
    """

    max_attempts: int = attrs.field(default=3, validator=_at_least(1))
    initial_backoff: float = attrs.field(default=0.1, validator=_at_least(0))
    max_backoff: float = attrs.field(default=5.0, validator=_at_least(0))
    multiplier: float = attrs.field(default=2.0, validator=_at_least(1))
    jitter: bool = True
    deadline: float | None = attrs.field(default=None, validator=_optional_positive)

    @classmethod
    def none(cls) -> RetryPolicy:
        """A policy that never retries."""
        return cls(max_attempts=1)

    def backoff(self, retry_number: int, rand: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``retry_number`` (1 for the first retry)."""
        base = min(self.max_backoff, self.initial_backoff * self.multiplier ** (retry_number - 1))
        if not self.jitter:
            return base
        return base * (0.5 + 0.5 * (rand or _random).random())


_random = random.Random()


@attrs.frozen(kw_only=True)
class TLSConfig:
    """Files for TLS connections (``grpcs://`` and ``https://`` URLs).

    Attributes:
        ca_file: PEM bundle of the certificate authorities to trust; ``None`` for the
            system's roots.
        cert_file: PEM client certificate, for servers that demand mutual TLS.
        key_file: PEM private key of ``cert_file``.
        server_hostname: the name to check the server certificate against, when it
            differs from the host in the URL.
    """

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_hostname: str | None = None

    def __attrs_post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise InvalidInputError("cert_file and key_file must be given together")


Protocol = Literal["grpc", "http"]

_SCHEMES: Final[dict[str, tuple[Protocol, bool, int]]] = {
    "grpc": ("grpc", False, 8001),
    "grpcs": ("grpc", True, 443),
    "http": ("http", False, 80),
    "https": ("http", True, 443),
}


@attrs.frozen(kw_only=True)
class Endpoint:
    """Where a client connects: protocol, TLS, host, port and (HTTP only) a base path."""

    protocol: Protocol
    tls: bool
    host: str
    port: int
    base_path: str = ""

    @property
    def authority(self) -> str:
        """``host:port``, an IPv6 host in brackets."""
        return self.authority_with_port(self.port)

    def authority_with_port(self, port: int) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{port}"

    def __str__(self) -> str:
        scheme = {("grpc", False): "grpc", ("grpc", True): "grpcs"}.get(
            (self.protocol, self.tls), "https" if self.tls else "http"
        )
        return f"{scheme}://{self.authority}{self.base_path}"


def parse_url(url: str) -> Endpoint:
    """Parse a client URL.

    ``host:port`` without a scheme and ``grpc://`` mean gRPC (default port 8001),
    ``grpcs://`` gRPC over TLS (443), ``http://`` HTTP (80) and ``https://`` HTTP over
    TLS (443). An HTTP URL may carry a base path, for servers behind a prefix.
    """
    text = url.strip()
    if "://" not in text:
        text = f"grpc://{text}"
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        raise InvalidInputError(
            f"unsupported URL scheme {parts.scheme!r} in {url!r}; "
            "use grpc://, grpcs://, http:// or https://"
        )
    protocol, tls, default_port = _SCHEMES[scheme]
    if not parts.hostname:
        raise InvalidInputError(f"no host in URL {url!r}")
    try:
        port = parts.port or default_port
    except ValueError as exc:
        raise InvalidInputError(f"invalid port in URL {url!r}") from exc
    base_path = parts.path.rstrip("/")
    if base_path and protocol == "grpc":
        raise InvalidInputError(f"a gRPC URL cannot have a path: {url!r}")
    if parts.query or parts.fragment:
        raise InvalidInputError(f"a client URL cannot have a query or fragment: {url!r}")
    return Endpoint(protocol=protocol, tls=tls, host=parts.hostname, port=port, base_path=base_path)
