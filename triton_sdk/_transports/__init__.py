"""Transports: the only code that touches the network.

Each protocol has a blocking and an asyncio transport with the three methods of
``_protocol``; what to send is the codecs' business (``_grpc_codec``, ``_http_codec``),
and foreign exceptions are mapped in ``_errors``. Importing a transport imports its
network library (grpc, aiohttp); nothing else in the package does.
"""
