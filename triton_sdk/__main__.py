"""``python -m triton_sdk``: the ``triton-sdk`` command; see ``triton_sdk._cli``."""

from __future__ import annotations

import sys

from ._cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
