"""Calls to a URL of their own (the metrics endpoint, an OpenAI-compatible frontend):
plain HTTP whatever the client's protocol, with the call's headers and the client's TLS
files. Every transport hands them here."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, Final
from urllib.parse import urlsplit

import attrs

from .._call import CallContext
from .._config import TLSConfig
from .._ops import FetchMetrics, OpenAIPost
from ._metrics import fetch_metrics, fetch_metrics_async
from ._openai import openai_post, openai_post_async

__all__ = ["OWN_URL_CALLS", "OwnTLS", "own_url_acall", "own_url_call"]

OWN_URL_CALLS: Final = (FetchMetrics, OpenAIPost)
"""The unary ops sent here (a stream of its own: :class:`OpenAIEvents`)."""


class OwnTLS:
    """The client's TLS for a URL of its own: its files always, its ``server_hostname``
    only on the hosts of its endpoints (the metrics endpoint by default; a frontend on
    another host has a certificate of its own, checked against that host)."""

    def __init__(self, tls: TLSConfig | None, hosts: Callable[[], Collection[str]]) -> None:
        self._tls = tls
        self._hosts = hosts
        self._elsewhere = tls
        if tls is not None and tls.server_hostname is not None:
            self._elsewhere = attrs.evolve(tls, server_hostname=None)

    def __call__(self, url: str) -> TLSConfig | None:
        if self._elsewhere is self._tls or urlsplit(url).hostname in self._hosts():
            return self._tls
        return self._elsewhere


def own_url_call(op: FetchMetrics | OpenAIPost, ctx: CallContext, tls: TLSConfig | None) -> Any:
    if isinstance(op, FetchMetrics):
        return fetch_metrics(op.url, ctx, tls)
    return openai_post(op, ctx, tls)


async def own_url_acall(
    op: FetchMetrics | OpenAIPost, ctx: CallContext, tls: TLSConfig | None
) -> Any:
    if isinstance(op, FetchMetrics):
        return await fetch_metrics_async(op.url, ctx, tls)
    return await openai_post_async(op, ctx, tls)
