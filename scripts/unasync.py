"""Generate the blocking client from the asyncio one.

    python scripts/unasync.py          write triton_sdk/_client.py
    python scripts/unasync.py --check  exit 1 (with a diff) if it is stale

``triton_sdk/_async_client.py`` is the source. Each rule below is a regular expression
applied to every line; a rule that no longer matches anything fails the run, so the
list cannot rot. The output is formatted with ruff, as the rest of the code is.
"""

from __future__ import annotations

import difflib
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "triton_sdk" / "_async_client.py"
TARGET = ROOT / "triton_sdk" / "_client.py"

HEADER = "# Generated from _async_client.py by scripts/unasync.py: edit that file, not this one.\n"

RULES: list[tuple[str, str]] = [
    # Prose that names the asyncio side.
    (
        r'^"""The asyncio client and its model handle\.',
        '"""The blocking client and its model handle.',
    ),
    (r"An asyncio client for one Triton server", "A blocking client for one Triton server"),
    (
        r"Every network method is a coroutine; a client belongs to the event loop it is",
        "One client may be shared by any number of threads, on both protocols, and may",
    ),
    (
        r"first used in\. Open it with ``async with`` or close it with :meth:`aclose`\.",
        "be called from code running inside an event loop (it never starts one).",
    ),
    (r"``async with model\.sequence\(\) as seq:``", "``with model.sequence() as seq:``"),
    # Syntax.
    (r"\basync def ", "def "),
    (r"\basync for ", "for "),
    (r"\basync with ", "with "),
    (r"\banext\(", "next("),
    (r"\bStopAsyncIteration\b", "StopIteration"),
    (r"\bawait ", ""),
    (r"__aenter__", "__enter__"),
    (r"__aexit__", "__exit__"),
    (r"__aiter__", "__iter__"),
    (r"__anext__", "__next__"),
    # Names: the twins of _concurrency and of the library's own classes.
    (r"\baclose", "close"),
    (r"\bacall\b", "call"),
    (r"\bastream\b", "stream"),
    (r"\baiterate\b", "iterate"),
    (r"\basleep\b", "sleep"),
    (r"\bashielded\b", "shielded"),
    (r"\bacurrent_worker\b", "current_worker"),
    (r"\bawait_until\b", "wait_until"),
    (r"AsyncGenerator\[(.+?), None\]", r"Generator[\1, None, None]"),
    (r"Async(?=[A-Z])", ""),
]


def generate(source: str) -> str:
    lines = source.splitlines(keepends=True)
    used = [False] * len(RULES)
    out = []
    for line in lines:
        for index, (pattern, replacement) in enumerate(RULES):
            line, count = re.subn(pattern, replacement, line)
            used[index] = used[index] or count > 0
        out.append(line)
    unused = [RULES[index][0] for index, hit in enumerate(used) if not hit]
    if unused:
        sys.exit(f"unasync: rules that matched nothing (remove them): {unused}")
    return _format(HEADER + "".join(out))


def _format(text: str) -> str:
    """Sort the imports and format, as ruff does for every other file."""
    for command in (["check", "--fix", "--quiet", "--select", "I"], ["format"]):
        text = subprocess.run(
            [sys.executable, "-m", "ruff", *command, "--stdin-filename", str(TARGET), "-"],
            input=text,
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
    return text


def main(argv: list[str]) -> int:
    generated = generate(SOURCE.read_text())
    if "--check" in argv:
        current = TARGET.read_text() if TARGET.exists() else ""
        if current == generated:
            return 0
        diff = difflib.unified_diff(
            current.splitlines(keepends=True),
            generated.splitlines(keepends=True),
            str(TARGET.relative_to(ROOT)),
            "generated",
        )
        sys.stdout.writelines(diff)
        print(f"\n{TARGET.relative_to(ROOT)} is stale: run python scripts/unasync.py")
        return 1
    TARGET.write_text(generated)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
