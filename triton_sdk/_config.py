"""Configuration value objects: retry policy, TLS files, endpoints, the "not given" sentinel."""

from __future__ import annotations

import enum
import ipaddress
import math
import os
import random
import re
import socket
from collections.abc import Callable, Iterable
from typing import Any, Final, Literal
from urllib.parse import SplitResult, urlsplit

import attrs

from ._checks import NO_LIMIT_FROM, numpy_number
from ._errors import InvalidInputError

__all__ = [
    "NOT_GIVEN",
    "Endpoint",
    "NotGiven",
    "RetryPolicy",
    "TLSConfig",
    "check_metrics_url",
    "parse_url",
    "redact_url",
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


def _at_least(
    minimum: float, integer: bool = False
) -> Callable[[object, attrs.Attribute[Any], float], None]:
    kinds: tuple[type, ...] = (int,) if integer else (int, float)

    def check(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, kinds):
            kind = "an int" if integer else "a number"
            raise InvalidInputError(f"{attribute.name} must be {kind}, got {type(value).__name__}")
        if not value >= minimum:
            raise InvalidInputError(f"{attribute.name} must be >= {minimum}, got {value!r}")

    return check


def _boolean(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):  # (jitter="no" would read as true)
        raise InvalidInputError(f"{attribute.name} must be a bool, got {type(value).__name__}")


def _plain_int(value: int) -> int:
    """A numpy integer (a number computed with numpy) as the int it holds; anything else
    as it is, for the validator to judge."""
    return int(value) if numpy_number(value, integer=True) else value


def _plain_float(value: float) -> float:
    """A numpy number as the Python number it holds (see _plain_int)."""
    plain: float = value.item() if numpy_number(value, integer=False) else value
    return plain


def _no_limit(value: float | None) -> float | None:
    """A deadline of ``inf``, or of 1e9 s or more, is none, as such a timeout is."""
    if value is not None:
        value = _plain_float(value)
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= NO_LIMIT_FROM:
        return None
    return value


def _optional_positive(
    instance: object, attribute: attrs.Attribute[float | None], value: float | None
) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(
            f"{attribute.name} must be a number or None, got {type(value).__name__}"
        )
    if not value > 0:
        raise InvalidInputError(f"{attribute.name} must be > 0 or None, got {value!r}")


@attrs.frozen(kw_only=True)
class RetryBudget:
    """A bound on a client's retries as a whole, so that an outage or an overloaded server
    does not turn into a retry storm: ``Client(url, retry_budget=RetryBudget())``.

    A token bucket: it starts with ``reserve`` retries; each call adds ``ratio`` of a
    retry (up to ``reserve``) and each retry takes one. Over any stretch, retries are at
    most ``reserve`` plus ``ratio`` of the calls made. A call whose retry finds the bucket
    empty fails with its last error.

    Attributes:
        ratio: retries earned per call (0.1: one retry per ten calls).
        reserve: retries available at once (the bucket's size), for bursts and restarts.
    """

    ratio: float = attrs.field(default=0.1, converter=_plain_float, validator=_at_least(0))
    reserve: int = attrs.field(
        default=100, converter=_plain_int, validator=_at_least(1, integer=True)
    )


@attrs.frozen
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
            ``None`` for no bound beyond ``max_attempts`` (as are ``inf`` and anything
            from 1e9 s on, which become ``None``).
    """

    max_attempts: int = attrs.field(
        default=3, converter=_plain_int, validator=_at_least(1, integer=True)
    )
    initial_backoff: float = attrs.field(
        default=0.1, converter=_plain_float, validator=_at_least(0)
    )
    max_backoff: float = attrs.field(default=5.0, converter=_plain_float, validator=_at_least(0))
    multiplier: float = attrs.field(default=2.0, converter=_plain_float, validator=_at_least(1))
    jitter: bool = attrs.field(default=True, validator=_boolean)
    deadline: float | None = attrs.field(
        default=None, converter=_no_limit, validator=_optional_positive
    )

    @classmethod
    def none(cls) -> RetryPolicy:
        """A policy that never retries."""
        return cls(max_attempts=1)

    @classmethod
    def resilient(cls) -> RetryPolicy:
        """A policy that rides out a server restart of several seconds: up to 30
        attempts, waits from 0.1 s growing to 1 s, all within 30 s.

        The default (3 attempts, about 0.3 s of waiting) fails fast instead, so that a
        caller with its own fallback hears of an outage at once.
        """
        return cls(max_attempts=30, initial_backoff=0.1, max_backoff=1.0, deadline=30.0)

    def backoff(self, retry_number: int, rand: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``retry_number`` (1 for the first retry)."""
        if not self.initial_backoff:
            return 0.0
        try:
            grown = self.initial_backoff * self.multiplier ** (retry_number - 1)
        except OverflowError:  # (a float power past 1e308 raises instead of giving inf)
            grown = math.inf
        base = min(self.max_backoff, grown, NO_LIMIT_FROM)  # (sleep() takes no more)
        if not self.jitter:
            return base
        return base * (0.5 + 0.5 * (rand or _random).random())


_random = random.Random()


def _path(value: str | os.PathLike[str] | None) -> str | None:
    """A file name: a str or an os.PathLike (checked: callers without types give others)."""
    if value is None:
        return None
    if isinstance(value, str | os.PathLike):
        path = os.fspath(value)
        if not path.strip():  # ("" is the system's roots to ssl, the working directory to grpc)
            raise InvalidInputError("a TLS file's path is empty: give the file, or None")
        return path
    raise InvalidInputError(f"TLS files are paths (str), got {type(value).__name__}")


def _host_name(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise InvalidInputError(f"{attribute.name} must be a str, got {type(value).__name__}")
    # (A name ending in '.' is checked against certificates differently by the transports.)
    if not is_host(value) or value.endswith("."):
        raise InvalidInputError(
            f"{attribute.name} {value!r} is not a host name (letters, digits, '-', '.', '_'; "
            "no final '.')"
        )


def is_host(host: str) -> bool:
    """Whether ``host`` is a host name (letters, digits, '-', '.', '_') or an IPv6 address."""
    if ":" in host:
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            return False
        return True
    return bool(host) and all(c.isalnum() or c in "-._" for c in host)


@attrs.frozen(kw_only=True)
class TLSConfig:
    """Files for TLS connections (``grpcs://`` and ``https://`` URLs).

    Attributes:
        ca_file: PEM bundle of the certificate authorities to trust; ``None`` for the
            system's roots.
        cert_file: PEM client certificate, for servers that demand mutual TLS.
        key_file: PEM private key of ``cert_file``.
        server_hostname: the name to check the server certificate against, when it
            differs from the host in the URL; it holds for the metrics endpoint and
            the OpenAI frontend too when they are on the client's host (one elsewhere
            is checked against its own host).
        (A key file with a passphrase is refused: decrypt it first.)
    """

    ca_file: str | None = attrs.field(default=None, converter=_path)
    cert_file: str | None = attrs.field(default=None, converter=_path)
    key_file: str | None = attrs.field(default=None, converter=_path)
    server_hostname: str | None = attrs.field(default=None, validator=_host_name)

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


def redact_url(url: str) -> str:
    """``url`` as it may be shown: without user info, query or fragment (they often carry
    credentials)."""
    text = url.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    head, mark, _ = _split_query(rest)
    if "@" in head:
        head = "***@" + head.rpartition("@")[2]
    elif "@" in rest:
        # "user:p/s?x@host" and "host:8000/?key=a@secret" look alike: show neither.
        return f"{scheme}{sep}***"
    return f"{scheme}{sep}{head}{mark}{'***' if mark else ''}"


def _split_query(rest: str) -> tuple[str, str, str]:
    """``rest`` cut at its first ``?`` or ``#``: what comes before, the mark, and after."""
    cut = min((at for at in (rest.find("?"), rest.find("#")) if at >= 0), default=-1)
    if cut < 0:
        return rest, "", ""
    return rest[:cut], rest[cut], rest[cut + 1 :]


def check_url_secrets(url: str, shown: str) -> None:
    """Refuse credentials in a URL: they belong in headers, where they are never shown."""
    head, mark, _ = _split_query(url.partition("://")[2] or url)
    if "@" in head or ("@" in url and "/" not in head):
        raise InvalidInputError(
            f"credentials in the URL {shown!r} are not sent: give them as headers "
            '(e.g. headers={"authorization": "Bearer ..."})'
        )
    if mark:
        raise InvalidInputError(
            f"a URL here cannot have a query or fragment: {shown!r}; credentials go in "
            'headers (e.g. headers={"authorization": "Bearer ..."})'
        )


def check_metrics_url(url: object) -> str:
    """An ``http(s)://host[:port][/path]`` URL without credentials."""
    return _side_url(url, "the metrics URL", "a metrics URL", "http(s)://host:port/path")


def check_openai_url(url: object) -> str:
    """The ``http(s)://host[:port]/path`` of an OpenAI-compatible frontend (the
    endpoint's path is appended), without credentials."""
    return _side_url(
        url, "openai_url", "an OpenAI-compatible frontend's URL", "http(s)://host:port/v1"
    )


def _side_url(url: object, name: str, kind: str, expected: str) -> str:
    """A plain HTTP URL the client calls besides its endpoints (their own ports)."""
    if not isinstance(url, str):
        raise InvalidInputError(f"{name} must be a str, got {type(url).__name__}")
    url = url.strip()  # (as parse_url: whitespace around, as read from a file)
    shown = redact_url(url)
    if _STRIPPED_BY_URLSPLIT.search(url):  # (urlsplit deletes them without a word)
        raise InvalidInputError(f"{name} {shown!r} has a tab or a line break")
    check_url_secrets(url, shown)
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
        raise InvalidInputError(f"not {kind}: {shown!r} (expected {expected})")
    _check_host(parts, shown)
    _check_path(parts.path, shown)
    return url


def _check_path(path: str, shown: str) -> None:
    """Refuse a URL path an HTTP request line cannot carry as it is (the blocking and
    the asyncio transports would send it apart, or not at all)."""
    if _UNSENDABLE_IN_PATH.search(path) or not path.isascii():
        raise InvalidInputError(
            f"the path of URL {shown!r} has a space, a control character or a character "
            "beyond ASCII; percent-encode it (%20)"
        )


_STRIPPED_BY_URLSPLIT: Final = re.compile("[\t\r\n]")
_UNSENDABLE_IN_PATH: Final = re.compile("[\x00-\x20\x7f]")
"""What an HTTP request line cannot carry in its path."""


def parse_url(url: str) -> Endpoint:
    """Parse a client URL.

    ``host:port`` without a scheme and ``grpc://`` mean gRPC (default port 8001),
    ``grpcs://`` gRPC over TLS (443), ``http://`` HTTP (80) and ``https://`` HTTP over
    TLS (443). An HTTP URL may carry a base path, for servers behind a prefix.
    Credentials in the URL (``user:password@``, a query) are refused: they belong in
    ``headers=``. Error messages never show them.
    """
    given: object = url  # callers without type checking can pass anything
    if not isinstance(given, str):
        raise InvalidInputError(f"the URL must be a str, got {type(given).__name__}")
    shown = redact_url(url)
    text = url.strip()
    if _STRIPPED_BY_URLSPLIT.search(text):  # (urlsplit deletes them without a word)
        raise InvalidInputError(f"the URL {shown!r} has a tab or a line break")
    if "://" not in text:
        text = f"grpc://{text}"
    try:
        parts = urlsplit(text)
    except ValueError:
        raise InvalidInputError(f"not a valid URL: {shown!r}") from None
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        raise InvalidInputError(
            f"unsupported URL scheme {parts.scheme!r} in {shown!r}; "
            "use grpc://, grpcs://, http:// or https://"
        )
    check_url_secrets(text, shown)
    protocol, tls, default_port = _SCHEMES[scheme]
    if not parts.hostname:
        raise InvalidInputError(f"no host in URL {shown!r}")
    _check_host(parts, shown)
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0 or parts.netloc.endswith(":"):  # (urllib reads "host:" as no port)
        raise InvalidInputError(f"invalid port in URL {shown!r}")
    base_path = parts.path.rstrip("/")
    if base_path and protocol == "grpc":
        raise InvalidInputError(f"a gRPC URL cannot have a path: {shown!r}")
    _check_path(base_path, shown)
    return Endpoint(
        protocol=protocol,
        tls=tls,
        host=parts.hostname,
        port=port or default_port,
        base_path=base_path,
    )


_PORT_PART: Final = re.compile(r"(:[0-9]*)?")
"""What may follow a bracketed IPv6 host in a URL (urllib drops anything else)."""


def _check_host(parts: SplitResult, shown: str) -> None:
    """Refuse a URL whose host is no host name: a NUL (gRPC cut the name there and
    connected elsewhere), a control character, a space; text after an IPv6 literal."""
    authority = parts.netloc.rpartition("@")[2]
    after_host = authority[authority.find("]") + 1 :] if authority.startswith("[") else ""
    if not is_host(parts.hostname or "") or not _PORT_PART.fullmatch(after_host):
        raise InvalidInputError(f"invalid host in URL {shown!r}")


_DNS_SCHEMES: Final = {"dns": "grpc", "dns+grpc": "grpc", "dns+http": "http"}


@attrs.frozen
class DnsName:
    """A DNS name whose addresses are a client's endpoints: ``dns:///name:port`` (gRPC)
    or ``dns+http:///name:port``; ``template`` is the endpoint with the name as its host."""

    name: str
    template: Endpoint

    def __str__(self) -> str:
        scheme = "dns" if self.template.protocol == "grpc" else "dns+http"
        return f"{scheme}:///{self.template.authority}{self.template.base_path}"

    def endpoints(self, addresses: Iterable[str]) -> list[Endpoint]:
        """One endpoint per address, on the name's port."""
        return [attrs.evolve(self.template, host=address) for address in addresses]


def parse_dns(url: str) -> DnsName | None:
    """The DNS name of a ``dns:///`` URL, or None for any other URL."""
    scheme, separator, rest = url.strip().partition(":///")
    protocol = _DNS_SCHEMES.get(scheme.lower()) if separator else None
    if protocol is None:
        if url.strip().lower().startswith(("dns:", "dns+")):
            raise InvalidInputError(
                f"unsupported DNS URL {redact_url(url)!r}: use dns:///name:port (gRPC) or "
                "dns+http:///name:port (three slashes: no DNS server is named)"
            )
        return None
    template = parse_url(f"{protocol}://{rest}")
    return DnsName(template.host, template)


def resolve_addresses(name: str) -> list[str]:
    """Every address (A and AAAA records) of ``name``, in the resolver's order."""
    infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))
