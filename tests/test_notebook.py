"""Notebooks: ``%load_ext torchdevice`` and the ``%torchdevice`` magic in IPython's own test
shell, and once in a real Jupyter kernel (``jupyter nbconvert --execute`` of
examples/notebook.ipynb) where nbconvert and ipykernel are installed.

Each runs in a child process: the extension enables torchdevice for the whole process.
"""

from __future__ import annotations

import html
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from childenv import clean_env

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CHILD = Path(__file__).parent / "children" / "notebook_session.py"

needs_ipython = pytest.mark.skipif(
    importlib.util.find_spec("IPython") is None,
    reason="IPython is not installed (pip install -e '.[notebook]')",
)
needs_jupyter = pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("nbconvert", "ipykernel", "nbformat")),
    reason="nbconvert, ipykernel and nbformat are not installed (pip install -e '.[notebook]')",
)


@needs_ipython
def test_the_extension_redirects_the_kernel_and_the_magic_reports(tmp_path):
    done = subprocess.run(
        [sys.executable, str(CHILD)],
        cwd=tmp_path,
        env=clean_env(IPYTHONDIR=str(tmp_path / "ipython")),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # The cell's CUDA request landed on the CPU (this host), with the values native gives.
    assert seen["loaded"] == ["cpu", [1.0, 1.0]]
    assert seen["report_type"] == "MigrationReport"
    assert seen["rows"] == [["torch.ones", "cuda", "cpu:0", 1, 2]]
    # Shown as a table with the cell's line; as Markdown with the same row.
    assert "<td><code>x = torch.ones(2, device=&quot;cuda&quot;)</code></td>" in seen["table"]
    assert '| `x = torch.ones(2, device="cuda")` |' in seen["markdown"]
    # The HTML page in a frame of its own, so that its style leaves the notebook's alone.
    framed, page = seen["page"]
    assert page.startswith("<!DOCTYPE html>")
    assert '<td class="src">x = torch.ones(2, device=&quot;cuda&quot;)</td>' in page  # the cell
    assert '<tr id="f1-L2" class="hit change">' in page
    assert framed == (
        f'<iframe srcdoc="{html.escape(page, quote=True)}" title="torchdevice migration '
        'report" style="width: 100%; height: 32em; border: 1px solid #ccc"></iframe>'
    )
    # Off: torch is native again, and a CUDA request fails as it does on this machine.
    assert seen["off"] in ("RuntimeError", "AssertionError")
    # A cell's own redirect() is redirected inside its block only; the report goes on.
    assert seen["scoped"] == ["cpu", True, False]
    assert seen["after_scope"] is False
    assert seen["total"] == 2
    assert seen["bad"] == [
        "MagicUsageError",
        "usage: %torchdevice [status | on | off | reset | report [text|markdown|html|json]]",
    ]
    assert seen["unloaded"] is False


def _text(value: object) -> str:
    """A notebook's multi-line string (a string, or a list of lines, as nbformat allows)."""
    return "".join(value) if isinstance(value, list) else str(value)


def _outputs(cell: dict[str, object]) -> list[dict[str, object]]:
    outputs = cell["outputs"]
    assert isinstance(outputs, list)
    return outputs


@needs_jupyter
def test_the_example_notebook_runs_in_a_real_kernel(tmp_path):
    """examples/notebook.ipynb executed by ``jupyter nbconvert --execute``: a kernel that
    is started and never exits while the cells run."""
    executed = tmp_path / "executed.ipynb"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter",
            "nbconvert",
            "--to",
            "notebook",
            "--execute",
            "--ExecutePreprocessor.timeout=240",
            f"--output={executed}",
            str(ROOT / "examples" / "notebook.ipynb"),
        ],
        cwd=tmp_path,
        env=clean_env(JUPYTER_PLATFORM_DIRS="1", IPYTHONDIR=str(tmp_path / "ipython")),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    cells = [c for c in json.loads(executed.read_text())["cells"] if c["cell_type"] == "code"]
    load, compute, report = cells
    assert "torchdevice: on (%load_ext torchdevice), redirecting to cpu" in "".join(
        _text(out.get("text", "")) for out in _outputs(load)
    )
    assert [_text(out["text"]) for out in _outputs(compute)] == ["cpu 6.0\n"]
    (shown,) = _outputs(report)
    data = shown["data"]
    assert isinstance(data, dict)
    table = _text(data["text/html"])
    assert ": 2 call(s) redirected at 2 call site(s)" in table
    assert "<td><code>x = torch.ones(3, device=&quot;cuda&quot;)</code></td>" in table
    assert "<td><code>y = (x * 2).cuda()</code></td>" in table
