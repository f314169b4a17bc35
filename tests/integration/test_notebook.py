"""The example notebook in docs/, executed on a Jupyter kernel as a reader would run it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK = Path(__file__).resolve().parents[2] / "docs" / "notebooks" / "quickstart.ipynb"


def outputs_of(cell: Any) -> list[Any]:
    return list(cell.get("outputs", []))


def test_the_notebook_runs_and_shows_rich_output(tmp_path: Path) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=180, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    )
    client.execute()
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    for cell in code:
        for output in outputs_of(cell):
            assert output["output_type"] != "error", output
            text = "".join(output.get("text", ""))
            assert "IProgress not found" not in text  # a plain bar without ipywidgets
            assert "Warning" not in text, text
    html_of = {
        "".join(cell.source).strip().splitlines()[-1]: "".join(
            output.get("data", {}).get("text/html", "") for output in outputs_of(cell)
        )
        for cell in code
    }
    assert "<table>" in html_of["embed.spec"]
    assert "TEXT" in html_of["embed.spec"]
    assert "InferResult of &#x27;text_embed&#x27;" in html_of["result"]
    assert "ModelNotFoundError" in html_of["caught"]
    assert "did you mean" in html_of["caught"]
    progress = "".join(
        "".join(output.get("text", ""))
        for cell in code
        if "progress=True" in "".join(cell.source)
        for output in outputs_of(cell)
    )
    assert "200sample" in progress  # a generator has no length: the count, no total
