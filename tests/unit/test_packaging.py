"""The distribution's name and files: what `pip install` and the docs tell users."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAME = "triton-sdk-py"  # "triton-sdk" on the package index is an unrelated project


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is new in Python 3.11")
def test_the_distribution_name_is_ours() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == NAME
    assert project["license-files"] == ["LICENSE"]


def test_every_install_command_names_the_distribution() -> None:
    texts = [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("triton_sdk/**/*.py")]
    texts += list(ROOT.glob("bench/*.py"))
    wrong = re.compile(r"pip install \"?triton[-_]sdk(?!-py)\b")
    offenders = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path in texts
        for match in wrong.finditer(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_license_and_changelog_ship() -> None:
    assert "BSD 3-Clause License" in (ROOT / "LICENSE").read_text()
    assert "## [Unreleased]" in (ROOT / "CHANGELOG.md").read_text()
