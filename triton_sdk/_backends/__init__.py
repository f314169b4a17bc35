"""Protocol adapters: the only code that talks to the network.

Each protocol has a sync and an asyncio backend with the same methods (see
``_protocol``); they translate every foreign exception into the SDK's own.
"""
