"""The report as a porting guide: rows at the user's lines, what to change, the JSON schema."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import torchdevice
from torchdevice import port
from torchdevice.port.table import BACKENDS_MPS_API, DEVICE_API, HELPERS
from torchdevice.reporting import SCHEMA_VERSION, Entry, MigrationReport, guide
from torchdevice.reporting.schema import json_schema
from torchdevice.sites import CallSite, origin

ROOT = Path(__file__).resolve().parents[1]
LIBRARY_FILE = os.path.join(sysconfig.get_paths()["purelib"], "transformers", "modeling.py")


def entry(
    filename: str,
    line: int,
    api: str,
    requested: str = "cuda",
    kind: str = "redirect",
    count: int = 1,
) -> Entry:
    return Entry(
        CallSite(filename, line, "main"),
        kind,
        api,
        requested,
        "cpu:0",  # type: ignore[arg-type]
        "CUDA request on a CPU-only host: CPU",
        count,
    )


@pytest.mark.parametrize(
    ("api", "requested", "kind", "advice", "change"),
    [
        ("torch.zeros", "cuda", "redirect", "pass `device`", True),
        ("torch.zeros", "cuda:1", "redirect", "pass `device`", True),
        ("Tensor.cuda", "cuda", "redirect", "`.to(device)`", True),
        ("Module.cuda", "cuda", "redirect", "`.to(device)`", True),
        ("torch.load", "cuda", "redirect", "`map_location=device`", True),
        ("torch.autocast", "cuda", "redirect", "`torch.autocast(device.type)`", True),
        (
            "torch.cuda.synchronize",
            "cuda",
            "device-api",
            "`if torch.accelerator.is_available(): torch.accelerator.synchronize()`",
            True,
        ),
        (
            "torch.distributed.init_process_group",
            "nccl",
            "redirect",
            "`backend=torch.distributed.get_default_backend_for_device(device)`",
            True,
        ),
        (
            "torch.nn.parallel.DistributedDataParallel",
            "device_ids=[1]",
            "redirect",
            '`device_ids=[rank] if device.type == "cuda" else None`',
            True,
        ),
        (
            "torch.cuda.Event",
            "cuda",
            "device-api",
            "`_device_event(enable_timing=True)` "
            "(torch.Event where there is an accelerator, time.perf_counter timing on the CPU)",
            True,
        ),
        (
            "torch.mps.empty_cache",
            "mps",
            "device-api",
            "`if torch.accelerator.is_available(): torch.accelerator.empty_cache()`",
            True,
        ),
        (
            "torch.cuda.memory_allocated",
            "cuda",
            "device-api",
            "`(torch.accelerator.memory_allocated() if torch.accelerator.is_available() else 0)`",
            True,
        ),
        ("torch.cuda.nvtx_mark", "cuda", "device-api", "no device-agnostic equivalent", True),
        ("torch.zeros", "cpu", "redirect", "no change: device-agnostic already", False),
        ("torch.special.ndtri", "mps", "fallback", "no change: the op ran on the CPU", False),
        ("torch.zeros", "cpu:-1", "override", "`cpu:-1` is torchdevice's CPU override", True),
    ],
)
def test_advice_per_row(api, requested, kind, advice, change):
    row = entry("/src/train.py", 3, api, requested, kind)
    assert port.advice_for(row).startswith(advice)
    assert port.to_change(row) is change


def test_libraries_are_named_and_the_users_files_are_not(tmp_path):
    assert origin(LIBRARY_FILE) == "transformers"
    assert origin(os.__file__) == "os"  # the standard library is no user code
    assert origin(str(tmp_path / "train.py")) is None


def test_text_groups_the_users_lines_with_source_and_advice_then_libraries(tmp_path):
    script = tmp_path / "train.py"
    script.write_text('import torch\nx = torch.zeros(2, device="cuda")\nx = x.cuda()\n')
    report = MigrationReport(
        "cpu host, test",
        (
            entry(LIBRARY_FILE, 10, "Module.to", count=7),
            entry(str(script), 3, "Tensor.cuda", count=2),
            entry(str(script), 2, "torch.zeros", count=5),
        ),
    )
    lines = report.to_text().splitlines()
    assert lines[0].startswith("torchdevice migration report (cpu host, test): 14 call(s)")
    # Short lines: what to do, the one line that chooses the device on a line of its own.
    assert lines[1] == (
        "Your code: 2 line(s) to change (`torchdevice port` writes the patch). "
        "Choose the device once,"
    )
    assert lines[2] == f"    {port.CHOOSE_DEVICE}"
    assert lines[3] == "  and pass it:"
    # By file and line (not by count), two lines each: what happened, then the source with
    # what to change it to (the file can be read: the port of the call itself).
    assert "train.py:2 in main(): torch.zeros(cuda) -> cpu:0 x5" in lines[4]
    assert (
        lines[5]
        == '      x = torch.zeros(2, device="cuda")  # change: `torch.zeros(2, device=device)`'
    )
    assert "train.py:3 in main(): Tensor.cuda(cuda) -> cpu:0 x2" in lines[6]
    assert lines[7] == "      x = x.cuda()  # change: `x.to(device)`"
    assert lines[8].startswith("Library call sites (not your lines")
    assert lines[9] == "  transformers: 1 call site(s), 7 call(s)"
    assert "modeling.py:10 in main(): Module.to(cuda)" in lines[10]
    assert len(lines) == 11
    assert max(len(line) for line in lines[:4]) <= 100


def test_text_stays_short_on_a_big_run(tmp_path):
    rows = tuple(entry(str(tmp_path / "big.py"), line, "torch.ones") for line in range(1, 41))
    text = MigrationReport("cpu host, test", rows).to_text()
    shown = [line for line in text.splitlines() if "big.py:" in line]
    assert len(shown) == guide.TEXT_LIMIT
    assert text.splitlines()[-1].startswith(
        f"... and {40 - guide.TEXT_LIMIT} more call site(s): the JSON report lists every one"
    )


def test_json_is_versioned_validated_and_read_back():
    report = MigrationReport("cpu host, test", (entry("/src/train.py", 2, "Tensor.cuda"),))
    data = json.loads(report.to_json())
    assert data["schema_version"] == SCHEMA_VERSION
    row = data["entries"][0]
    assert (row["library"], row["to_change"], row["advice"]) == (
        None,
        True,
        "`.to(device)` (keep `non_blocking=` if given)",
    )
    assert MigrationReport.from_dict(data) == report
    with pytest.raises(ValueError, match="schema version 2 is newer than this torchdevice"):
        MigrationReport.from_dict({**data, "schema_version": 2})


def test_an_invalid_report_is_not_written():
    bad = MigrationReport("cpu host, test", (entry("/src/train.py", 2, "torch.ones", count=0),))
    with pytest.raises(ValueError, match="count"):
        bad.to_json()


def test_the_published_schema_is_the_models():
    published = (ROOT / "docs" / "report-schema.json").read_text(encoding="utf-8")
    assert published == json_schema(), (
        "docs/report-schema.json is stale: python -m torchdevice.reporting.schema > "
        "docs/report-schema.json"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "args"),
    [
        (ROOT / "examples" / "train_cuda.py", ["--epochs", "1", "--min-accuracy", "0"]),
        (ROOT / "tests" / "scripts" / "trainer_cuda.py", ["{tmp}/trainer"]),
    ],
    ids=["train_cuda", "hf_trainer"],
)
def test_the_report_lists_every_line_written_for_cuda(tmp_path, script, args):
    out = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k != "ACTIVATE_TORCH_DEVICE"}
    env["HF_HUB_OFFLINE"] = "1"
    argv = [arg.format(tmp=tmp_path) for arg in args]
    result = subprocess.run(
        [sys.executable, "-m", "torchdevice", "--report", str(out), str(script), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    reported = {
        row["line"] for row in data["entries"] if row["file"] == str(script) and row["to_change"]
    }
    source = script.read_text().splitlines()
    docstring_end = next(
        n
        for n, line in enumerate(source, 1)
        if '"""' in line.strip()[3:] or (n > 1 and '"""' in line)
    )
    written_for_cuda = {
        n for n, line in enumerate(source, 1) if n > docstring_end and "cuda" in line
    }
    assert reported == written_for_cuda
    libraries = {row["library"] for row in data["entries"]} - {None}
    assert libraries <= {"transformers", "accelerate"}


def test_a_real_run_reports_device_api_rows(tmp_path):
    torchdevice.enable()
    import torch

    torch.cuda.synchronize()
    text = torchdevice.report().to_text()
    assert "torch.cuda.synchronize(cuda) -> cpu:0 x1 [device-api:" in text
    assert (
        "      torch.cuda.synchronize()  # change: "
        "`if torch.accelerator.is_available(): torch.accelerator.synchronize()`"
    ) in text.splitlines()


def test_the_port_by_hand_page_shows_the_table_the_report_and_the_patch_use():
    page = (ROOT / "docs" / "porting.md").read_text(encoding="utf-8")
    tables = [("torch.cuda", DEVICE_API), ("torch.backends.mps", BACKENDS_MPS_API)]
    missing = [
        name
        for module, table in tables
        for name, rewrite in table.items()
        if f"`{module}.{name}({rewrite.example})`" not in page
        or (rewrite.form not in ("none", "keep") and f"`{rewrite.code()}`" not in page)
        or (rewrite.form in ("none", "keep") and rewrite.why not in page)
    ]
    assert missing == []
    assert all(HELPERS[name] in page for name in HELPERS)
