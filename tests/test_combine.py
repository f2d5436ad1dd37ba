"""Reports made elsewhere: path maps, portable reports, ``torchdevice combine``, and
``torchdevice port`` from several reports."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from torchdevice.port import MARK
from torchdevice.reporting import Entry, MigrationReport, relocate
from torchdevice.sites import CallSite
from torchdevice.tools import cli

SOURCE = 'import torch\nx = torch.ones(2, device="cuda")\ny = torch.zeros(2).cuda()\n'
ONES = (2, 2, 4, 32)  # the span of torch.ones(...) on line 2
CUDA = (3, 3, 4, 25)  # the span of torch.zeros(2).cuda()
WHY = "CUDA request on a CPU-only host"


def _report(
    filename: str, *, ones: int = 0, cuda: int = 0, host: str = "ci host"
) -> MigrationReport:
    entries = []
    if ones:
        entries.append(
            Entry(
                CallSite(filename, 2, "<module>"),
                "redirect",
                "torch.ones",
                "cuda",
                "cpu:0",
                WHY,
                ones,
                (ONES,),
            )
        )
    if cuda:
        entries.append(
            Entry(
                CallSite(filename, 3, "<module>"),
                "redirect",
                "Tensor.cuda",
                "cuda",
                "cpu:0",
                WHY,
                cuda,
                (CUDA,),
            )
        )
    return MigrationReport(host, tuple(entries))


def _checkout(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "train.py").write_text(SOURCE, encoding="utf-8")
    subprocess.run(["git", "init", "-q"], cwd=path, check=True, timeout=60)
    return path


def _write(path: Path, report: MigrationReport) -> Path:
    path.write_text(report.to_json(), encoding="utf-8")
    return path


def test_relocate_maps_prefixes_then_makes_paths_relative() -> None:
    report = MigrationReport(
        "h",
        (
            *_report("/ci/build/src/train.py", ones=2).entries,
            *_report("C:\\ci\\build\\src\\train.py", ones=3).entries,  # the same file, Windows
            *_report("/elsewhere/lib.py", cuda=1).entries,
        ),
    )
    moved = relocate(report, ["/ci/build=/home/me/repo", ("C:\\ci\\build", "/home/me/repo")])
    assert sorted((e.site.filename, e.count) for e in moved.entries) == [
        ("/elsewhere/lib.py", 1),
        ("/home/me/repo/src/train.py", 5),  # one row now: counts add up, spans kept
    ]
    portable = relocate(moved, relative_to="/home/me/repo")
    assert sorted(e.site.filename for e in portable.entries) == [
        "/elsewhere/lib.py",  # outside the root: left absolute
        "src/train.py",
    ]
    assert all(e.positions for e in portable.entries)
    unmoved = relocate(report, ["/ci/buildX=/x"])  # whole directories only
    assert set(unmoved.entries) == set(report.entries)
    with pytest.raises(ValueError, match="a path mapping is OLD=NEW, not '/ci'"):
        relocate(report, ["/ci"])


def test_combine_merges_reports_as_coverage_combine_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _write(tmp_path / "a.json", _report("/ci/train.py", ones=2, host="ci host"))
    second = _write(tmp_path / "b.json", _report("/ci/train.py", ones=1, cuda=4, host="mac"))
    assert cli.main(["combine", str(first), str(second)]) == 0
    merged = json.loads(capsys.readouterr().out)
    assert (merged["host"], merged["processes"], merged["total_calls"]) == ("ci host", 2, 7)
    assert sorted((e["api"], e["count"]) for e in merged["entries"]) == [
        ("Tensor.cuda", 4),
        ("torch.ones", 3),
    ]
    out = tmp_path / "merged.txt"
    assert cli.main(["combine", "-o", str(out), str(first), str(second)]) == 0
    assert out.read_text(encoding="utf-8").startswith(
        "torchdevice migration report (ci host): 7 call(s) redirected at 2 call site(s) in 2 "
        "processes"
    )
    assert capsys.readouterr().err == (
        f"torchdevice combine: 2 report(s), 7 call(s) at 2 call site(s) -> {out}\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["combine"], "the following arguments are required: REPORT.json"),
        (["combine", "{missing}"], "cannot read the report '{missing}': [Errno 2]"),
        (["combine", "--paths", "nonsense", "{good}"], "a path mapping is OLD=NEW"),
    ],
)
def test_combine_usage_errors_are_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    good = _write(tmp_path / "good.json", _report("/ci/train.py", ones=1))
    names = {"missing": str(tmp_path / "missing.json"), "good": str(good)}
    with pytest.raises(SystemExit) as exit_info:
        cli.main([arg.format(**names) for arg in argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message.format(**names) in err.splitlines()[-1]


def test_port_takes_several_reports_and_a_path_map(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two CI runs, each of which ran one of the lines, ported in another checkout."""
    here = _checkout(tmp_path / "here")
    first = _write(tmp_path / "a.json", _report("/ci/build/train.py", ones=1))
    second = _write(tmp_path / "b.json", _report("/ci/build/train.py", cuda=1))
    patch = tmp_path / "p.patch"
    argv = [
        "port",
        "--report",
        str(first),
        "--report",
        str(second),
        "--paths",
        f"/ci/build={here}",
        "--root",
        str(here),
        "-o",
        str(patch),
    ]
    assert cli.main(argv) == 0
    assert "1 file(s) changed, 0 skipped" in capsys.readouterr().err
    subprocess.run(["git", "apply", str(patch)], cwd=here, check=True, timeout=60)
    ported = (here / "train.py").read_text(encoding="utf-8")
    assert "x = torch.ones(2, device=device)\n" in ported
    assert "y = torch.zeros(2).to(device)\n" in ported


def test_a_portable_report_ports_in_any_checkout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    made = _write(tmp_path / "ci.json", _report("/ci/build/train.py", ones=1, cuda=1))
    portable = tmp_path / "portable.json"
    argv = ["combine", "--relative-to", "/ci/build", "-o", str(portable), str(made)]
    assert cli.main(argv) == 0
    files = {e["file"] for e in json.loads(portable.read_text(encoding="utf-8"))["entries"]}
    assert files == {"train.py"}
    here = _checkout(tmp_path / "checkout")
    patch = tmp_path / "p.patch"
    argv = ["port", "--report", str(portable), "--root", str(here), "-o", str(patch)]
    assert cli.main(argv) == 0
    capsys.readouterr()
    subprocess.run(["git", "apply", str(patch)], cwd=here, check=True, timeout=60)
    assert "torch.zeros(2).to(device)" in (here / "train.py").read_text(encoding="utf-8")


def test_port_static_also_ports_the_lines_that_did_not_run_and_marks_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    here = _checkout(tmp_path / "here")
    (here / "train.py").write_text(
        SOURCE
        + textwrap.dedent("""\
            if x.sum() > 100:  # never taken
                torch.cuda.synchronize()
                z = torch.randn(3, device="cuda:1").to("cuda")
                with torch.autocast("cuda"):
                    pass
                torch.distributed.init_process_group("nccl")
                ok = torch.device("cpu")  # device-agnostic already: left alone
            """),
        encoding="utf-8",
    )
    report = _write(tmp_path / "r.json", _report(str(here / "train.py"), ones=1, cuda=1))
    base = ["port", "--report", str(report), "--root", str(here)]
    assert cli.main(base) == 0
    without = capsys.readouterr().out
    assert "+    if torch.accelerator.is_available():" not in without  # only what ran
    assert cli.main([*base, "--static"]) == 0
    patch = capsys.readouterr().out
    added = [line[1:] for line in patch.splitlines() if line.startswith("+")]
    unverified = (
        f"{MARK} unverified: this line did not run in the reported run(s); check it by hand"
    )
    assert added[-9:] == [
        f"    {unverified}",
        "    if torch.accelerator.is_available():",
        "        torch.accelerator.synchronize()",
        f"    {unverified}",
        "    z = torch.randn(3, device=device).to(device)",
        f"    {unverified}",
        "    with torch.autocast(device.type):",
        f"    {unverified}",
        "    torch.distributed.init_process_group("
        "torch.distributed.get_default_backend_for_device(device))",
    ]
    # The lines that ran carry no such mark.
    assert "x = torch.ones(2, device=device)" in added
    assert added[added.index("x = torch.ones(2, device=device)") - 1] != unverified


def test_a_bad_path_mapping_stops_port_before_the_script_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "ran"
    script = tmp_path / "s.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n", encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["port", "--paths", "nonsense", str(script)])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "torchdevice port: error: a path mapping is OLD=NEW, not 'nonsense'"
    )
    assert not marker.exists()
