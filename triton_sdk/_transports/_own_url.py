"""Calls to a URL of their own (the metrics endpoint, an OpenAI-compatible frontend):
plain HTTP whatever the client's protocol, with the call's headers and the client's TLS
files. Every transport hands them here."""

from __future__ import annotations

from typing import Any, Final

from .._call import CallContext
from .._config import TLSConfig
from .._ops import FetchMetrics, OpenAIPost
from ._metrics import fetch_metrics, fetch_metrics_async
from ._openai import openai_post, openai_post_async

__all__ = ["OWN_URL_CALLS", "own_url_acall", "own_url_call"]

OWN_URL_CALLS: Final = (FetchMetrics, OpenAIPost)
"""The unary ops sent here (a stream of its own: :class:`OpenAIEvents`)."""


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
