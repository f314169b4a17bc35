"""A thread that reads a stream to its end, for tests that stop the stream from outside."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable


class StreamReader:
    """Reads ``stream`` in a thread of its own from construction on; ``seen`` holds what
    it read, ``outcome`` ``["ended"]`` or the exception that ended the loop."""

    def __init__(self, stream: Iterable[object]) -> None:
        self.seen: list[object] = []
        self.outcome: list[object] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: Iterable[object]) -> None:
        try:
            for item in stream:
                self.seen.append(item)
            self.outcome.append("ended")
        except BaseException as error:
            self.outcome.append(error)

    def wait_until_waiting(self, timeout: float = 10) -> None:
        """Return once the reader has had an item and is back waiting for the next."""
        deadline = time.monotonic() + timeout
        while not self.seen and self._thread.is_alive():
            assert time.monotonic() < deadline, "the stream sent nothing"
            time.sleep(0.01)
        time.sleep(0.05)

    def join(self, timeout: float) -> None:
        """Wait for the loop to end; fail if it is still waiting after ``timeout``."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the reader still waits for the rest of the stream"
