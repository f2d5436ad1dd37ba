"""``torchdevice port``: the rewrite rules over source text, and the patch they make.

The rules are pure functions of a file's text and its report entries, so most tests hand
them a snippet and entries whose spans are the snippet's own calls (as ``co_positions``
gives them); tests/test_port_examples.py does the round trip through real runs.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import cast

import pytest
import torch

import mps_page
from torchdevice.port import advice_for
from torchdevice.port import calls as port_module
from torchdevice.port.advice import advise
from torchdevice.port.calls import ported_call
from torchdevice.port.layout import WIDTH
from torchdevice.port.patch import library_of, patch_for
from torchdevice.port.source import COMMENT_WIDTH, MARK, unwrapped
from torchdevice.port.table import (
    BACKENDS_MPS_API,
    DEVICE_API,
    DEVICE_EXPRESSION,
    HELPERS,
    rewrite_for,
)
from torchdevice.reporting import Entry, EventKind, MigrationReport
from torchdevice.sites import CallSite
from torchdevice.tools import cli

DEVICE_LINE = f"device = {DEVICE_EXPRESSION}"


def port_source(text: str, entries: list[Entry]) -> tuple[str, tuple[str, ...]]:
    """The port of ``text``, each comment read back as one line (how comments wrap at
    COMMENT_WIDTH is test_long_comments_wrap_and_read_back_as_one_line's)."""
    new, notes = port_module.port_source(text, entries)
    return unwrapped(new), notes


def entries_for(source: str, *wanted: tuple[str, str], kind: str = "redirect") -> list[Entry]:
    """Report entries for the calls in ``source`` whose text starts with each ``prefix``.

    ``wanted`` is ``(api, prefix)`` pairs; each entry carries the exact spans of the
    matching calls, as the report does on 3.11+ (ast and co_positions agree on them).
    """
    tree = ast.parse(source)
    entries = []
    for api, prefix in wanted:
        positions = []
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            text = ast.get_source_segment(source, node) or ""
            if text.startswith(prefix):
                positions.append(
                    (node.lineno, node.end_lineno or 0, node.col_offset, node.end_col_offset or 0)
                )
        assert positions, f"no call starts with {prefix!r}"
        row_kind = cast(EventKind, "device-api" if api.startswith("torch.cuda.") else kind)
        site = CallSite("x.py", positions[0][0], "f")
        spans = tuple(sorted(positions))
        entries.append(Entry(site, row_kind, api, "cuda", "cpu", "test", len(spans), spans))
    return entries


def port(source: str, *wanted: tuple[str, str]) -> tuple[str, tuple[str, ...]]:
    source = textwrap.dedent(source)
    new, notes = port_source(source, entries_for(source, *wanted))
    ast.parse(new)  # the result always parses
    return new, notes


def test_device_arguments_become_one_device_inserted_after_the_imports() -> None:
    new, notes = port(
        '''\
        """Doc."""
        import torch
        from torch import nn

        x = torch.zeros(2, device="cuda:0")
        y = x.cuda(non_blocking=True)
        m = nn.Linear(2, 2).cuda()
        z = y.to("cuda")
        w = torch.ones(1, device=torch.device("cuda", 0))
        v = torch.device("cuda", w.get_device() + 1)
        s = torch.load("f.pt", map_location="cuda")
        t = torch.load("f.pt")
        torch.set_default_device("cuda")
        ''',
        ("torch.zeros", "torch.zeros"),
        ("Tensor.cuda", "x.cuda"),
        ("Module.cuda", "nn.Linear(2, 2).cuda"),
        ("Tensor.to", "y.to"),
        ("torch.ones", "torch.ones"),
        ("torch.device", "torch.device"),
        ("torch.load", "torch.load"),
        ("torch.set_default_device", "torch.set_default"),
    )
    assert new == textwrap.dedent(f'''\
        """Doc."""
        import torch
        from torch import nn

        {DEVICE_LINE}

        x = torch.zeros(2, device=device)
        y = x.to(device, non_blocking=True)
        m = nn.Linear(2, 2).to(device)
        z = y.to(device)
        w = torch.ones(1, device=device)
        v = torch.device(device.type, w.get_device() + 1)
        s = torch.load("f.pt", map_location=device)
        t = torch.load("f.pt", map_location=device)
        torch.set_default_device(device)
        ''')
    assert notes == ()


def test_a_module_level_device_binding_is_rewritten_and_local_copies_removed() -> None:
    new, _ = port(
        """\
        import torch
        device = torch.device("cuda")

        def f():
            device = torch.device("cuda")
            return torch.zeros(1, device=device), torch.ones(1).cuda(0)
        """,
        ("torch.device", 'torch.device("cuda")'),
        ("Tensor.cuda", "torch.ones(1).cuda"),
    )
    assert new == textwrap.dedent(f"""\
        import torch
        {DEVICE_LINE}

        def f():
            return torch.zeros(1, device=device), torch.ones(1).to(device)
        """)


def test_a_removed_statement_never_leaves_a_block_empty_nor_takes_its_neighbours() -> None:
    new, _ = port(
        """\
        import torch

        def f(flag):
            if flag:
                device = torch.device("cuda")
            x = 1; device = torch.device("cuda")
            return torch.zeros(1, device=device)
        """,
        ("torch.device", 'torch.device("cuda")'),
    )
    assert new.split(DEVICE_LINE + "\n")[1] == textwrap.dedent("""\

        def f(flag):
            if flag:
                pass
            x = 1; pass
            return torch.zeros(1, device=device)
        """)


def test_another_device_binding_makes_the_port_choose_another_name() -> None:
    new, _ = port(
        """\
        import torch

        def f(device):
            return torch.zeros(1, device="cuda")
        """,
        ("torch.zeros", "torch.zeros"),
    )
    assert "target_device = torch.accelerator" in new
    assert "torch.zeros(1, device=target_device)" in new


def test_nested_spans_make_no_overlapping_edits() -> None:
    new, _ = port(
        """\
        import torch
        x = torch.zeros(1, device=torch.device("cuda")).cuda(torch.device("cuda:0"))
        """,
        ("Tensor.cuda", 'torch.zeros(1, device=torch.device("cuda")).cuda'),
        ("torch.zeros", "torch.zeros(1"),
        ("torch.device", 'torch.device("cuda")'),
        ("torch.device", 'torch.device("cuda:0")'),
    )
    assert new.splitlines()[-1] == "x = torch.zeros(1, device=device).to(device)"


def test_two_rows_for_one_call_edit_it_once_and_comments_stay_one_line() -> None:
    new, notes = port(
        """\
        import torch
        m = torch.nn.Linear(1, 1).cuda()
        x = torch.zeros(1, device=f(
            "gpu"))
        """,
        ("Tensor.cuda", "torch.nn.Linear(1, 1).cuda"),
        ("Module.cuda", "torch.nn.Linear(1, 1).cuda"),
        ("torch.zeros", "torch.zeros"),
    )
    assert new.split(DEVICE_LINE + "\n")[1] == textwrap.dedent(f"""\
        m = torch.nn.Linear(1, 1).to(device)
        {MARK} the device here is `f( "gpu")`, which the port cannot read: make it `device`
        x = torch.zeros(1, device=f(
            "gpu"))
        """)
    assert len(notes) == 1


def _code_lines(new: str) -> list[str]:
    """The ported module's statements after the preamble (device binding and helpers)."""
    tree = ast.parse(new)
    preamble = {"device", *HELPERS}
    lines = []
    for statement in tree.body:
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            continue
        names = {getattr(statement, "name", None)} | {
            getattr(target, "id", None) for target in getattr(statement, "targets", ())
        }
        if names & preamble:
            continue
        lines.append(ast.unparse(statement))
    return lines


def test_facade_calls_become_code_that_runs_without_an_accelerator() -> None:
    source = """\
        import torch
        torch.manual_seed(0)
        torch.cuda.manual_seed_all(0)
        torch.cuda.manual_seed_all(1)
        start = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        used = torch.cuda.memory_allocated()
        n = torch.cuda.device_count()
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            pass
        torch.cuda.empty_cache()
        with torch.cuda.device(0):
            index = torch.cuda.current_device()
        if n: torch.cuda.reset_peak_memory_stats()
        """
    new, notes = port(
        source,
        ("torch.cuda.manual_seed_all", "torch.cuda.manual_seed_all"),
        ("torch.cuda.Event", "torch.cuda.Event"),
        ("torch.cuda.synchronize", "torch.cuda.sync"),
        ("torch.cuda.memory_allocated", "torch.cuda.memory_allocated"),
        ("torch.cuda.device_count", "torch.cuda.device_count"),
        ("torch.cuda.Stream", "torch.cuda.Stream"),
        ("torch.cuda.stream", "torch.cuda.stream"),
        ("torch.cuda.empty_cache", "torch.cuda.empty_cache"),
        ("torch.cuda.device", "torch.cuda.device("),
        ("torch.cuda.current_device", "torch.cuda.current_device"),
        ("torch.cuda.reset_peak_memory_stats", "torch.cuda.reset_peak"),
    )
    guard = "torch.accelerator.is_available()"
    assert _code_lines(new) == [
        "torch.manual_seed(0)",
        "torch.manual_seed(1)",  # the same seed again is not repeated; another one is kept
        "start = _device_event(enable_timing=True)",
        f"if {guard}:\n    torch.accelerator.synchronize()",
        f"used = torch.accelerator.memory_allocated() if {guard} else 0",
        "n = torch.accelerator.device_count()",
        "side = _device_stream()",
        "with side:\n    pass",
        f"if {guard}:\n    torch.accelerator.empty_cache()",
        f"with torch.accelerator.device_index(0 if {guard} else None):\n"
        f"    index = torch.accelerator.current_device_index() if {guard} else 0",
        f"if n:\n    torch.accelerator.reset_peak_memory_stats() if {guard} else None",
    ]
    assert notes == ()
    assert (
        f"{MARK} removed `torch.cuda.manual_seed_all(0)`: the torch.manual_seed above seeds "
        "every device\n" in new
    )
    # The helpers it calls are defined in the file, with what they need imported.
    assert "import time\n" in new
    assert all(f"def {name}(" in new for name in ("_device_event", "_device_stream"))
    assert "_current_stream" not in new
    # And the result runs here, on a host without an accelerator, without torchdevice.
    done = subprocess.run(
        [sys.executable, "-c", new + "\nprint(used, index, n)"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert (done.returncode, done.stdout) == (0, "0 0 0\n"), done.stderr


@pytest.mark.parametrize("name", sorted(DEVICE_API))
def test_the_patch_writes_what_the_report_advises(name: str) -> None:
    """For every device API the table knows, the advice's code is the patch's code."""
    rewrite = DEVICE_API[name]
    api = f"torch.cuda.{name}"
    call = f"{api}({rewrite.example})"
    source = f"import torch\ndef f(index, stream, seed):\n    result = {call}\n"
    if rewrite.form == "statement":
        source = f"import torch\ndef f(index, stream, seed):\n    {call}\n"
    elif rewrite.form == "context" or name == "stream":
        source = f"import torch\ndef f(index, stream, seed):\n    with {call}:\n        pass\n"
    new, notes = port_source(source, entries_for(source, (api, api + "(")))
    entry = entries_for(source, (api, api + "("))[0]
    advice = advice_for(entry)
    assert advice == rewrite.advice(api)
    if rewrite.form == "none":
        assert rewrite.why in advice
        assert notes == (f'{api}(): {rewrite.why}; keep it behind `if device.type == "cuda":`',)
        assert f"{api}(" in new  # left as it was, with the comment
        return
    code = advice.split("`")[1]
    function = next(n for n in ast.parse(new).body if getattr(n, "name", "") == "f")
    statement = function.body[0]
    if rewrite.form == "statement":
        assert ast.dump(statement) == ast.dump(ast.parse(code).body[0])
    else:
        expression = getattr(statement, "value", None) or statement.items[0].context_expr
        assert ast.dump(expression) == ast.dump(ast.parse(code, mode="eval").body)
    if rewrite.comment:  # the line is fixed: the why is in the advice, not a comment
        assert notes == ()
        assert rewrite.why in advice
        assert MARK not in new


def test_what_has_no_equivalent_is_left_with_a_comment_saying_why() -> None:
    new, notes = port(
        """\
        import torch
        def f(where):
            props = torch.cuda.get_device_properties(0)
            return torch.zeros(1, device=where)
        """,
        ("torch.cuda.get_device_properties", "torch.cuda.get_device_properties"),
        ("torch.zeros", "torch.zeros"),
    )
    properties = (
        "torch.cuda.get_device_properties(): device properties (multi_processor_count, "
        "major/minor, name) have no device-agnostic API; `.total_memory` is "
        'torch.accelerator.get_memory_info()[1]; keep it behind `if device.type == "cuda":`'
    )
    assert new == textwrap.dedent(f"""\
        import torch

        {DEVICE_LINE}
        def f(where):
            {MARK} {properties}
            props = torch.cuda.get_device_properties(0)
            {MARK} the device here is `where`, set elsewhere: make it `device` where it is defined
            return torch.zeros(1, device=where)
        """)
    assert len(notes) == 2


GUARD_REMOVED = (
    f"{MARK} removed a guard that exits without CUDA: the ported code runs on `device`, the "
    "CPU when there is no accelerator\n"
)


@pytest.mark.parametrize(
    ("guard", "expected"),
    [
        ('if not torch.cuda.is_available():\n    sys.exit("needs CUDA")\n', GUARD_REMOVED),
        ("if not torch.cuda.is_available():\n    raise SystemExit(1)\n", GUARD_REMOVED),
        (
            'if not torch.cuda.is_available():\n    print("no GPU")\n    logger.error("no")\n'
            "    sys.exit(1)\n",
            GUARD_REMOVED,
        ),
        (
            "assert torch.cuda.is_available()\n",
            f"{MARK} removed `assert torch.cuda."
            "is_available()`: the ported code runs on the CPU when there is no accelerator\n",
        ),
        # Anything else keeps its meaning, through torch.accelerator.is_available().
        ("if not torch.cuda.is_available():\n    cleanup()\n    sys.exit(1)\n", None),
        ('if not torch.cuda.is_available():\n    print("no GPU")\n', None),
        ("if not torch.cuda.is_available():\n    sys.exit(1)\nelse:\n    pass\n", None),
        ("ok = not torch.cuda.is_available()\n", None),
    ],
)
def test_a_guard_that_only_exits_without_cuda_is_removed(guard: str, expected: str | None) -> None:
    source = "import sys\nimport torch\n" + guard + "x = 1\n"
    new, _ = port_source(source, entries_for(source, ("torch.cuda.is_available", "torch.cuda")))
    if expected is not None:  # `import sys` goes with the guard's sys.exit, its one use
        imports = "import torch\n" if "sys." in guard else "import sys\nimport torch\n"
        assert new == imports + expected + "x = 1\n"
    else:
        assert new == source.replace("torch.cuda.is_available", "torch.accelerator.is_available")


def test_autocast_gradscaler_and_backend_take_the_device() -> None:
    new, _ = port(
        """\
        import torch
        import torch.distributed as dist
        with torch.autocast("cuda"):
            pass
        with torch.cuda.amp.autocast(dtype=torch.float16):
            pass
        a = torch.amp.GradScaler("cuda")
        b = torch.cuda.amp.GradScaler()
        dist.init_process_group("nccl", rank=0, world_size=1)
        """,
        ("torch.autocast", "torch.autocast"),
        ("torch.cuda.amp.autocast", "torch.cuda.amp.autocast"),
        ("torch.amp.GradScaler", "torch.amp.GradScaler"),
        ("torch.cuda.amp.GradScaler", "torch.cuda.amp.GradScaler"),
        ("torch.distributed.init_process_group", "dist.init_process_group"),
    )
    assert new.split(DEVICE_LINE + "\n")[1].splitlines() == [
        "with torch.autocast(device.type):",
        "    pass",
        "with torch.autocast(device.type, dtype=torch.float16):",
        "    pass",
        "a = torch.amp.GradScaler(device.type)",
        "b = torch.amp.GradScaler(device.type)",
        # Past 99 characters once ported: broken at its brackets, as ruff format would.
        "dist.init_process_group(",
        "    torch.distributed.get_default_backend_for_device(device), rank=0, world_size=1",
        ")",
    ]


def test_mps_first_code_and_aliases() -> None:
    new, notes = port(
        """\
        import torch
        from torch.cuda import synchronize as sync
        if not torch.backends.mps.is_available():
            raise SystemExit("needs a Mac")
        x = torch.ones(1, device="mps")
        torch.mps.synchronize()
        sync()
        """,
        ("torch.backends.mps.is_available", "torch.backends"),
        ("torch.ones", "torch.ones"),
        ("torch.mps.synchronize", "torch.mps"),
        ("torch.cuda.synchronize", "sync"),
    )
    assert new.split(DEVICE_LINE + "\n")[1] == textwrap.dedent(f"""\
        {GUARD_REMOVED.replace("CUDA", "MPS")}        x = torch.ones(1, device=device)
        if torch.accelerator.is_available():
            torch.accelerator.synchronize()
        {MARK} a call of torch.cuda.synchronize under another name (`sync`): port it by hand
        sync()
        """)
    assert len(notes) == 1


def test_rows_of_torchdevice_rules() -> None:
    source = textwrap.dedent("""\
        import torch
        x = torch.zeros(2, dtype=torch.float64, device="mps")
        y = torch.special.ndtri(x)
        z = x.to("cpu:-1")
        """)
    rows = [
        *entries_for(source, ("torch.zeros", "torch.zeros"), kind="dtype"),
        *entries_for(source, ("torch.special_ndtri", "torch.special"), kind="fallback"),
        *entries_for(source, ("Tensor.to", "x.to"), kind="override"),
    ]
    rows[1] = dataclasses.replace(rows[1], requested="mps:0, float32")
    new, notes = port_source(source, rows)
    assert new.splitlines()[1:] == [
        f"{MARK} MPS has no float64: torchdevice narrowed it to float32 here; use float32 (or "
        "keep this on the CPU) for MPS",
        'x = torch.zeros(2, dtype=torch.float64, device="mps")',
        f"{MARK} torch.special_ndtri has no kernel on mps: torchdevice reran it on the CPU; "
        "natively, move it to the CPU (or set PYTORCH_ENABLE_MPS_FALLBACK=1 on a Mac)",
        "y = torch.special.ndtri(x)",
        'z = x.to("cpu")',
    ]
    assert len(notes) == 2


def test_positions_are_byte_columns_and_a_changed_file_is_left_alone() -> None:
    source = 'import torch\nname = "é"; x = torch.zeros(1, device="cuda")\n'
    new, _ = port_source(source, entries_for(source, ("torch.zeros", "torch.zeros")))
    assert new.endswith('name = "é"; x = torch.zeros(1, device=device)\n')
    stale = Entry(
        CallSite("x.py", 2, "f"), "redirect", "torch.zeros", "cuda", "cpu", "", 1, ((2, 2, 0, 5),)
    )
    assert port_source(source, [stale]) == (source, ())
    # Python 3.10 keeps no spans: the calls on the row's line with the API's name are used.
    unplaced = Entry(CallSite("x.py", 2, "f"), "redirect", "torch.zeros", "cuda", "cpu", "", 1)
    assert port_source(source, [unplaced])[0] == new


def test_library_files_are_skipped_and_the_patch_applies(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text('import torch\nx = torch.ones(2, device="cuda")\n', encoding="utf-8")
    user = entries_for(script.read_text(), ("torch.ones", "torch.ones"))[0]
    user = dataclasses.replace(user, site=CallSite(str(script), 2, "<module>"))
    library = Entry(
        CallSite(os.path.join(os.path.dirname(ast.__file__), "ast.py"), 1, "f"),
        "redirect",
        "torch.ones",
        "cuda",
        "cpu",
        "",
        1,
        (),
    )
    assert library_of(library.site.filename) == "ast"  # the standard library
    assert library_of(torch.__file__) == "torch"
    assert library_of(cli.__file__) == "torchdevice"
    assert library_of("<string>") == "no file"
    assert library_of(str(script)) is None
    result = patch_for((user, library), tmp_path)
    assert result.skipped == ((library.site.filename, "not yours (ast)"),)
    assert result.patch.startswith(
        f"{MARK} the patched code needs torch 2.7 or later "
        "(for torch.accelerator.current_accelerator)\ndiff --git a/train.py b/train.py\n"
    )
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "apply"], cwd=tmp_path, input=result.patch, text=True, check=True)
    assert "torch.ones(2, device=device)" in script.read_text()


def test_cli_port_from_a_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "t.py"
    script.write_text("import torch\nx = torch.ones(2).cuda()\n", encoding="utf-8")
    entry = entries_for(script.read_text(), ("Tensor.cuda", "torch.ones(2).cuda"))[0]
    raw = MigrationReport("cpu host", (entry,)).to_dict()
    raw["entries"][0]["file"] = str(script)
    (tmp_path / "r.json").write_text(json.dumps(raw), encoding="utf-8")
    out = tmp_path / "p.patch"
    argv = ["port", "--report", str(tmp_path / "r.json"), "--root", str(tmp_path), "-o", str(out)]
    assert cli.main(argv) == 0
    assert "+x = torch.ones(2).to(device)\n" in out.read_text()
    assert "1 file(s) changed, 0 skipped" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["port"])  # neither a report nor a script: says so, not "not both"
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "torchdevice port: error: give --report REPORT.json (a JSON migration report) or a "
        "SCRIPT to run"
    )
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["port", "--report", str(tmp_path / "r.json"), "script.py"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "torchdevice port: error: give either --report REPORT.json or a SCRIPT to run, not both"
    )
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["port", "--report", str(tmp_path / "missing.json")])
    assert exit_info.value.code == 2
    assert "torchdevice port: error: cannot read the report" in capsys.readouterr().err


def test_cli_port_runs_the_script(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("import torch\nprint(torch.ones(2).cuda().device)\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "torchdevice", "port", "--root", str(tmp_path), str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1] == "diff --git a/t.py b/t.py"  # the script's print: stderr
    assert "+print(torch.ones(2).to(device).device)\n" in done.stdout
    assert "cpu" in done.stderr
    # The run's report was a temporary file, deleted once read: stderr does not name it.
    assert "migration report written to" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1].endswith("torchdevice port: 1 file(s) changed, 0 skipped")


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (
            '{"schema_version": 99, "entries": []}',
            "migration report schema version 99 is newer than this torchdevice reads (1): "
            "upgrade torchdevice",
        ),
        ("[1, 2]", "it is not a JSON object"),
        (
            "torchdevice migration report (cpu host): 2 call(s) redirected at 2 call site(s)\n",
            "it is the text report, which is for people; the tools read the JSON report, "
            "which `torchdevice run --report report.json SCRIPT` writes (a path ending in .json)",
        ),
        ('{"entries": ', "it is not valid JSON (Expecting value: line 1 column 13 (char 12))"),
        ('{"entries": [{"file": "x.py"}]}', "missing field 'kind'"),
        (
            '{"entries": [{"file": "x.py", "line": 1, "function": "f", "kind": "odd", "api": "a",'
            ' "requested": "cuda", "decided": "cpu", "reason": "r", "count": 1}]}',
            "unknown event kind 'odd' in a migration report entry",
        ),
    ],
)
def test_cli_port_refuses_a_report_it_cannot_read_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, why: str
) -> None:
    report = tmp_path / "r.json"
    report.write_text(content, encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["port", "--report", str(report)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err == f"torchdevice port: error: cannot read the report {str(report)!r}: {why}\n"


def test_cli_port_says_when_the_report_has_no_entries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "r.json"
    report.write_text(MigrationReport("cpu host", ()).to_json(), encoding="utf-8")
    assert cli.main(["port", "--report", str(report)]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "torchdevice port: the report has no entries: the run asked for no device, so there "
        "is nothing to port",
        "torchdevice port: 0 file(s) changed, 0 skipped",
    ]


def test_an_f_string_without_fields_is_a_device_literal() -> None:
    new, notes = port(
        """\
        import torch
        x = torch.zeros(1, device=f"cuda:0")
        y = torch.zeros(1, device=f"cuda:{x.numel()}")
        """,
        ("torch.zeros", "torch.zeros"),
    )
    assert "x = torch.zeros(1, device=device)\n" in new
    assert notes == (
        'the device here is `f"cuda:{x.numel()}"`, which the port cannot read: make it `device`',
    )


def test_cli_port_has_its_own_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["port", "--help"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("usage: torchdevice port [-h] [--report REPORT.json]")
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "    port " in capsys.readouterr().out


@pytest.mark.parametrize(
    ("api", "call"),
    [
        ("Tensor.cuda", "x.cuda()"),
        ("Module.cuda", "model.cuda()"),
        ("torch.device", 'torch.device("cuda")'),
        ("torch.autocast", 'torch.autocast("cuda")'),
        ("torch.amp.GradScaler", 'torch.amp.GradScaler("cuda")'),
        ("torch.load", 'torch.load(f, map_location="cuda")'),
        (
            "torch.distributed.init_process_group",
            'torch.distributed.init_process_group(backend="nccl")',
        ),
        ("torch.distributed.new_group", 'torch.distributed.new_group(backend="nccl")'),
    ],
)
def test_the_patch_writes_what_the_report_advises_for_device_arguments(api: str, call: str) -> None:
    """The other rows the report advises on: the advice's code is in the ported line."""
    source = f"import torch\ndef f(x, model, f):\n    result = {call}\n"
    entries = entries_for(source, (api, call.split("(", maxsplit=1)[0]))
    new, _ = port_module.port_source(source, entries, layout=False)  # the call on one line
    advice = advice_for(entries[0])
    code = advice.split("`")[1]
    line = next(text for text in new.splitlines() if text.startswith("    result = "))
    assert code in line, (advice, line)


# -- issue 28: the device-choice idiom, MPS-first code, stand-in values, the advice -------


def _file_rows(
    tmp_path: Path, source: str, *wanted: tuple[str, str], kind: str = "redirect"
) -> list[Entry]:
    """``entries_for`` rows whose file is ``source`` written to disk, so that the report's
    advice reads it (as it does at the end of a run)."""
    path = tmp_path / f"script{len(list(tmp_path.iterdir()))}.py"
    path.write_text(source, encoding="utf-8")
    return [
        dataclasses.replace(row, site=CallSite(str(path), row.site.lineno, "f"))
        for row in entries_for(source, *wanted, kind=kind)
    ]


def _child(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in a child (ported code, or the simulated accelerator: both change
    the process), with ``env`` over this environment."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **env},
    )


def _flat(text: str) -> str:
    return " ".join(text.split())


def assert_advice_is_the_patch(source: str, rows: list[Entry]) -> str:
    """Each row's advice is what the patch writes at its call: the ported code is in the
    patched file, each comment the advice names is a comment there."""
    new, _ = port_source(source, rows)
    # The advice is the patch's code before its long lines are broken (the same tokens),
    # and no line the patch writes is past PEP 8's 99 characters.
    whole, _ = port_module.port_source(source, rows, layout=False)
    raw, _ = port_module.port_source(source, rows)
    assert ast.dump(ast.parse(raw)) == ast.dump(ast.parse(whole))
    assert all(len(line) <= WIDTH for line in raw.splitlines() if line not in source), raw
    whole = unwrapped(whole)
    for row in rows:
        ported = ported_call(source, row)
        assert ported is not None, row
        code, said = ported
        advice = advice_for(row)
        assert advice == advise(source, row)
        if code:
            assert _flat(code) in _flat(whole), (code, whole)
            assert advice.startswith(f"`{code}`")
        rewrite = rewrite_for(row.api)
        for note in said:
            if rewrite.comment and note == _flat(rewrite.why):
                # A rewrite that fixed its line (str(device)) says why in the advice only.
                assert _flat(f"{MARK} {note}") not in _flat(whole), (note, whole)
                continue
            assert _flat(f"{MARK} {note}") in _flat(whole), (note, whole)
            assert note in advice
    return new


#: Real arguments for the table's placeholders: the advice must show these, not "seed".
_ARGUMENTS = {"seed": "1234", "index": "1", "stream": "side", "0": "0"}


@pytest.mark.parametrize(
    ("module", "name"),
    [("torch.cuda", name) for name in sorted(DEVICE_API)]
    + [("torch.mps", name) for name in ("synchronize", "current_allocated_memory")]
    + [("torch.backends.mps", name) for name in sorted(BACKENDS_MPS_API)],
)
def test_the_advice_is_the_patch_with_the_calls_own_arguments(
    module: str, name: str, tmp_path: Path
) -> None:
    rewrite = rewrite_for(f"{module}.{name}")
    arguments = _ARGUMENTS.get(rewrite.example, rewrite.example)
    call = f"{module}.{name}({arguments})"
    body = f"    result = {call}\n"
    if rewrite.form == "statement":
        body = f"    {call}\n"
    elif rewrite.form == "context" or name == "stream":
        body = f"    with {call}:\n        pass\n"
    source = f"import torch\ndef f(side):\n{body}"
    rows = _file_rows(tmp_path, source, (f"{module}.{name}", f"{module}.{name}("))
    rows = [dataclasses.replace(row, kind="device-api") for row in rows]
    assert_advice_is_the_patch(source, rows)
    advice = advice_for(rows[0])
    dropped = rewrite.form == "expression" and "{args}" not in rewrite.target  # str(device)
    if rewrite.form not in ("none", "keep") and arguments and not dropped:
        assert arguments in advice  # the call's own argument, not a placeholder
    assert "`seed`" not in advice
    if rewrite.form == "none":
        kind = "mps" if module == "torch.backends.mps" else module.split(".")[1]
        assert f'keep it behind `if device.type == "{kind}":`' in advice
        assert '"backends"' not in advice


DEVICE_CHOICES = [
    # (the line as written, its row's API and call prefix)
    ('device = "cuda" if torch.cuda.is_available() else "cpu"', "torch.cuda.is_available"),
    (
        'device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")',
        "torch.cuda.is_available",
    ),
    (
        'device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")',
        "torch.cuda.is_available",
    ),
    ('device = "mps" if torch.backends.mps.is_available() else "cpu"', "torch.backends.mps"),
    (
        'device = torch.device("mps" if torch.backends.mps.is_available() else "cpu")',
        "torch.backends.mps",
    ),
    (
        'device = "cuda" if torch.cuda.is_available() else "mps" if '
        'torch.backends.mps.is_available() else "cpu"',
        "torch.cuda.is_available",
    ),
    (
        'if torch.cuda.is_available():\n    device = torch.device("cuda")\n'
        'elif torch.backends.mps.is_available():\n    device = "mps"\n'
        'else:\n    device = torch.device("cpu")',
        "torch.cuda.is_available",
    ),
]


@pytest.mark.parametrize(("line", "api"), DEVICE_CHOICES)
def test_a_device_choice_becomes_the_one_device(line: str, api: str, tmp_path: Path) -> None:
    source = f"import torch\n{line}\nx = torch.ones(2, device=device)\n"
    name = "torch.backends.mps.is_available" if api == "torch.backends.mps" else api
    rows = _file_rows(tmp_path, source, (name, api), ("torch.ones", "torch.ones"))
    rows[0] = dataclasses.replace(rows[0], kind="device-api")
    new = assert_advice_is_the_patch(source, rows)
    assert new == f"import torch\n{DEVICE_LINE}\nx = torch.ones(2, device=device)\n"
    # Where the accelerator is not CUDA (a Mac), the ported line picks it: the simulated
    # accelerator here, registered in a child, torchdevice not enabled.
    done = _child(_ON_SIMULATED + new + "print(x.device.type)\n", ACTIVATE_TORCH_DEVICE="")
    assert (done.returncode, done.stdout) == (0, "simgpu\n"), done.stderr


_ON_SIMULATED = "import torchdevice.testing as t\nt.register()\n"


def test_a_choice_bound_to_another_name_a_function_an_argument_or_compared() -> None:
    new, notes = port(
        """\
        import torch
        DEV = "cuda" if torch.cuda.is_available() else "cpu"
        other = torch.device("mps" if torch.backends.mps.is_available() else "cpu")
        slow = DEV == "cpu"

        def f():
            device = "cuda" if torch.cuda.is_available() else "cpu"
            with torch.autocast(device_type=device):
                y = torch.ones(1, device=device)
                return y.to(
                    "cuda" if torch.cuda.is_available() else "cpu")
        """,
        ("torch.cuda.is_available", "torch.cuda.is_available"),
        ("torch.backends.mps.is_available", "torch.backends"),
        ("torch.autocast", "torch.autocast"),
        ("torch.ones", "torch.ones"),
    )
    assert new == textwrap.dedent(f"""\
        import torch
        {MARK} `DEV` is a torch.device now, no string: its comparisons with a string compare its .type
        DEV = {DEVICE_EXPRESSION}
        other = DEV
        slow = DEV.type == "cpu"

        def f():
            device = DEV
            with torch.autocast(device_type=device.type):
                y = torch.ones(1, device=device)
                return y.to(
                    DEV)
        """)  # noqa: E501
    assert len(notes) == 1


PYTORCH_MPS_CHECK = """\
import sys
import torch
if not torch.backends.mps.is_available():
    if not torch.backends.mps.is_built():
        print("MPS not available because the current PyTorch install was not "
              "built with MPS enabled.")
    else:
        print("MPS not available because the current MacOS version is not 12.3+ "
              "and/or you do not have an MPS-enabled device on this machine.")
    sys.exit(1)
mps_device = torch.device("mps")
x = torch.ones(5, device=mps_device)
"""


def test_pytorchs_own_mps_check_is_removed_and_its_device_is_the_one_device(
    tmp_path: Path,
) -> None:
    rows = _file_rows(
        tmp_path,
        PYTORCH_MPS_CHECK,
        ("torch.backends.mps.is_available", "torch.backends.mps.is_available"),
        ("torch.backends.mps.is_built", "torch.backends.mps.is_built"),
        ("torch.device", 'torch.device("mps")'),
    )
    rows = [dataclasses.replace(row, kind="device-api") for row in rows[:2]] + rows[2:]
    new = assert_advice_is_the_patch(PYTORCH_MPS_CHECK, rows)
    assert new == (  # `import sys` went with the guard's sys.exit(1), its one use
        "import torch\n"
        f"{MARK} removed a guard that exits without MPS: the ported code runs on `mps_device`, "
        "the CPU when there is no accelerator\n"
        f"mps_device = {DEVICE_EXPRESSION}\nx = torch.ones(5, device=mps_device)\n"
    )
    # The is_built row alone gives the same advice: it is part of the guard.
    assert advice_for(rows[1]) == advice_for(rows[0])
    done = _child(new + "print(x.sum().item())", PYTHONPATH="")
    assert (done.returncode, done.stdout) == (0, "5.0\n"), done.stderr


def test_the_mps_pages_check_keeps_its_else_branch_and_runs_on_the_cpu(tmp_path: Path) -> None:
    """``python -m torchdevice port mps_page.py`` made a script that printed "MPS not
    available ... not built with MPS enabled." and did nothing on the CPU (issue 36): the
    check goes, its ``else:`` body stays, one level less indented, and its
    ``torch.device("mps")`` is the one device (no ``mps_device = device`` alias)."""
    rows = _file_rows(
        tmp_path,
        mps_page.SOURCE,
        ("torch.backends.mps.is_available", "torch.backends.mps.is_available"),
        ("torch.device", 'torch.device("mps")'),
        ("torch.ones", 'torch.ones(5, device="mps")'),
    )
    rows = [dataclasses.replace(rows[0], kind="device-api"), *rows[1:]]
    new, _ = port_source(mps_page.SOURCE, rows)
    assert new == (
        "import torch\n\n"
        "# Check that MPS is available\n"
        f"{MARK} removed a check that only said why there is no MPS: its work runs on "
        "`mps_device`, the CPU when there is no accelerator\n"
        f"mps_device = {DEVICE_EXPRESSION}\n"
        "\n"
        "# Create a Tensor directly on the mps device\n"
        "x = torch.ones(5, device=mps_device)\n"
        "# Or\n"
        "x = torch.ones(5, device=mps_device)\n"
        "\n"
        "# Any operation happens on the GPU\n"
        "y = x * 2\n"
        "\n"
        "# Move your model to mps just like any other device\n"
        "model = torch.nn.Linear(5, 1)\n"
        "model.to(mps_device)\n"
        "\n"
        "# Now every call will run on the GPU\n"
        "pred = model(x)\n"
        'note = """two\n'
        '    lines"""\n'
        'print("pred", tuple(pred.shape), y.sum().item(), note)\n'
    )
    done = _child(new, PYTHONPATH="")
    assert (done.returncode, done.stdout) == (0, mps_page.PRINTS), done.stderr


@pytest.mark.parametrize(
    "check",
    [
        'if torch.cuda.is_available():\n    y = torch.ones(2, device="cuda")\n'
        '    print(y.sum().item())\nelse:\n    print("no GPU")\n',
        'if not torch.cuda.is_available():\n    print("no GPU")\nelse:\n'
        '    y = torch.ones(2, device="cuda")\n    print(y.sum().item())\n',
    ],
)
def test_a_check_that_only_says_why_keeps_its_work_in_either_order(check: str) -> None:
    source = "import torch\n" + check + "z = 1\n"
    rows = entries_for(
        source, ("torch.cuda.is_available", "torch.cuda"), ("torch.ones", "torch.ones")
    )
    new, _ = port_source(source, rows)
    assert new == (
        "import torch\n\n"
        f"device = {DEVICE_EXPRESSION}\n"
        f"{MARK} removed a check that only said why there is no CUDA: its work runs on "
        "`device`, the CPU when there is no accelerator\n"
        "y = torch.ones(2, device=device)\nprint(y.sum().item())\nz = 1\n"
    )


def test_mps_calls_outside_a_guard(tmp_path: Path) -> None:
    source = (
        "import torch\n"
        "if torch.backends.mps.is_available():\n"
        "    print(torch.backends.mps.get_name(), torch.backends.mps.get_core_count())\n"
        "built = torch.backends.mps.is_built()\n"
    )
    rows = _file_rows(
        tmp_path,
        source,
        ("torch.backends.mps.is_available", "torch.backends.mps.is_available"),
        ("torch.backends.mps.get_name", "torch.backends.mps.get_name"),
        ("torch.backends.mps.get_core_count", "torch.backends.mps.get_core_count"),
        ("torch.backends.mps.is_built", "torch.backends.mps.is_built"),
    )
    rows = [dataclasses.replace(row, kind="device-api") for row in rows]
    new = assert_advice_is_the_patch(source, rows)
    assert "if torch.accelerator.is_available():\n" in new  # as torch.cuda.is_available()
    assert "print(str(device), torch.backends.mps.get_core_count())" in new
    advice = [advice_for(row) for row in rows]
    assert advice[0] == "`torch.accelerator.is_available()`"
    assert advice[2].endswith('keep it behind `if device.type == "mps":`')
    assert advice[3].startswith("torch.backends.mps.is_built(): whether this torch was built")


def test_pinned_memory_only_where_there_is_an_accelerator(tmp_path: Path) -> None:
    source = (
        "import torch\n"
        "x = torch.ones(3).pin_memory()\n"
        "y = torch.empty(3, pin_memory=True)\n"
        "z = (x + 1).pin_memory()\n"
    )
    rows = [
        *_file_rows(tmp_path, source, ("Tensor.pin_memory", "torch.ones(3).pin")),
        *_file_rows(tmp_path, source, ("torch.empty", "torch.empty")),
        *_file_rows(tmp_path, source, ("Tensor.pin_memory", "(x + 1).pin")),
    ]
    rows[1] = dataclasses.replace(rows[1], kind="device-api", requested="pin_memory=True")
    new = assert_advice_is_the_patch(source, rows)
    guard = "torch.accelerator.is_available()"
    assert new.splitlines()[1:] == [  # a whole value: no parentheses of its own
        f"x = torch.ones(3).pin_memory() if {guard} else torch.ones(3)",
        f"y = torch.empty(3, pin_memory={guard})",
        f"z = (x + 1).pin_memory() if {guard} else (x + 1)",
    ]
    for registered in ("", _ON_SIMULATED):  # no accelerator here; the simulated one
        code = registered + new + "print(x.is_pinned(), z.sum().item())"
        done = _child(code, ACTIVATE_TORCH_DEVICE="")
        assert (done.returncode, done.stdout) == (0, f"{bool(registered)} 6.0\n"), done.stderr


def test_total_memory_and_stand_in_values_that_feed_arithmetic(tmp_path: Path) -> None:
    source = textwrap.dedent("""\
        import torch
        def f():
            total = torch.cuda.get_device_properties(0).total_memory
            budget = int(0.8 * total)
            free, total_now = torch.cuda.mem_get_info()
            used = 1 - free / total_now
            peak = torch.cuda.max_memory_allocated() / 2**20
            stats = torch.cuda.memory_stats()
            return budget, used, peak, stats.get("x", 0), torch.cuda.memory_allocated()
        """)
    rows = _file_rows(
        tmp_path,
        source,
        ("torch.cuda.get_device_properties", "torch.cuda.get_device_properties"),
        ("torch.cuda.mem_get_info", "torch.cuda.mem_get_info"),
        ("torch.cuda.max_memory_allocated", "torch.cuda.max_memory_allocated"),
        ("torch.cuda.memory_stats", "torch.cuda.memory_stats"),
        ("torch.cuda.memory_allocated", "torch.cuda.memory_allocated"),
    )
    new = assert_advice_is_the_patch(source, rows)
    guard = "torch.accelerator.is_available()"
    info = "torch.accelerator.get_memory_info"
    said = "here (a stand-in, not a measurement)"
    body = new.split("def f():\n")[1].splitlines()
    # A conditional that is a whole value takes no parentheses; a line past 99 characters
    # is broken at its brackets, as ruff format would.
    assert body == [
        f"    {MARK} without an accelerator `{info}(0)[1]` is 0 {said}",
        f"    total = {info}(0)[1] if {guard} else 0",
        "    budget = int(0.8 * total)",
        f"    {MARK} without an accelerator `{info}()` is (0, 0) {said}; the division(s) by "
        "`total_now` below are guarded",
        "    free, total_now = (",
        f"        {info}() if {guard} else (0, 0)",
        "    )",
        "    used = 1 - (free / total_now if total_now else 0.0)",
        f"    {MARK} without an accelerator `torch.accelerator.max_memory_allocated()` is 0 "
        f"{said}; guard what is computed from it",
        "    peak = (",
        f"        torch.accelerator.max_memory_allocated() if {guard} else 0",
        "    ) / 2**20",
        f"    stats = torch.accelerator.memory_stats() if {guard} else {{}}",
        "    return (",
        "        budget,",
        "        used,",
        "        peak,",
        '        stats.get("x", 0),',
        f"        (torch.accelerator.memory_allocated() if {guard} else 0),",
        "    )",
    ]
    done = _child(new + "print(f())", PYTHONPATH="")
    assert (done.returncode, done.stdout) == (0, "(0, 1.0, 0.0, 0, 0)\n"), done.stderr


def test_autocast_advice_keeps_the_dtype(tmp_path: Path) -> None:
    source = (
        "import torch\nwith torch.autocast('cuda', dtype=torch.float16, enabled=True):\n    pass\n"
    )
    rows = _file_rows(tmp_path, source, ("torch.autocast", "torch.autocast"))
    assert_advice_is_the_patch(source, rows)
    assert advice_for(rows[0]) == (
        "`torch.autocast(device.type, dtype=torch.float16, enabled=True)`"
    )


_ACC = "torch.accelerator."


@pytest.mark.parametrize(
    ("call", "api", "version", "apis"),
    [
        ('torch.zeros(1, device="cuda")', "torch.zeros", (2, 7), ("current_accelerator",)),
        ("torch.cuda.synchronize()", "torch.cuda.sync", (2, 6), ("is_available", "synchronize")),
        ("torch.cuda.memory_allocated()", "torch.cuda.memory", (2, 9), ("memory_allocated",)),
        ("torch.cuda.mem_get_info()", "torch.cuda.mem_get_info", (2, 10), ("get_memory_info",)),
        ("torch.cuda.device(0)", "torch.cuda.device", (2, 8), ("device_index",)),
    ],
)
def test_the_patch_says_which_torch_it_needs(
    call: str, api: str, version: tuple[int, int], apis: tuple[str, ...], tmp_path: Path
) -> None:
    script = tmp_path / "t.py"
    script.write_text(f"import torch\nx = {call}\n", encoding="utf-8")
    name = "torch.cuda." + call.split("(", maxsplit=1)[0].rsplit(".", 1)[1]
    rows = entries_for(script.read_text(), (name if api.startswith("torch.cuda") else api, api))
    rows = [dataclasses.replace(row, site=CallSite(str(script), 2, "f")) for row in rows]
    result = patch_for(rows, tmp_path)
    apis = tuple(_ACC + name for name in apis)
    assert result.needs == (version, apis)
    first, rest = result.patch.split("\n", 1)
    needs = f"torch {version[0]}.{version[1]} or later (for {', '.join(apis)})"
    assert first == f"{MARK} the patched code needs {needs}"
    assert rest.startswith("diff --git a/t.py b/t.py\n")
    # The oldest of them is what this torch has or newer; git apply reads past the line.
    assert tuple(int(part) for part in torch.__version__.split(".")[:2]) >= version
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "apply"], cwd=tmp_path, input=result.patch, text=True, check=True)
    assert call not in script.read_text()


def test_the_port_says_when_this_environments_torch_is_older_than_the_patch_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "t.py"
    script.write_text("import torch\nx = torch.cuda.mem_get_info()\n", encoding="utf-8")
    rows = entries_for(script.read_text(), ("torch.cuda.mem_get_info", "torch.cuda"))
    raw = MigrationReport("cpu host", tuple(rows)).to_dict()
    raw["entries"][0]["file"] = str(script)
    (tmp_path / "r.json").write_text(json.dumps(raw), encoding="utf-8")
    argv = ["port", "--report", str(tmp_path / "r.json"), "--root", str(tmp_path)]
    assert cli.main(argv) == 0
    assert "this environment has torch" not in capsys.readouterr().err  # 2.13 >= 2.10
    monkeypatch.setattr("importlib.metadata.version", lambda name: "2.9.1+cpu")
    assert cli.main(argv) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[-2] == (
        "torchdevice port: the patched code needs torch 2.10 or later (for "
        "torch.accelerator.get_memory_info); this environment has torch 2.9.1+cpu"
    )
    assert err[-1] == "torchdevice port: 1 file(s) changed, 0 skipped"


#: A CUDA script of the first hour (issue 36): a guard that exits through sys, an event
#: (a helper), and a division by a memory statistic.
FIRST_HOUR = """\
import sys

import torch

if not torch.cuda.is_available():
    print("This script requires a CUDA GPU")
    sys.exit(1)

start = torch.cuda.Event(enable_timing=True)
start.record()
if True:
    used = torch.cuda.memory_allocated() / torch.cuda.max_memory_allocated()
"""


def test_the_first_hours_patch_is_tidy() -> None:
    """``torchdevice port`` of FIRST_HOUR left ``import sys`` with no use, three blank lines
    after its helpers, and comment lines of 150-190 characters (issue 36 item 9)."""
    rows = entries_for(
        FIRST_HOUR,
        ("torch.cuda.is_available", "torch.cuda.is_available"),
        ("torch.cuda.Event", "torch.cuda.Event"),
        ("torch.cuda.memory_allocated", "torch.cuda.memory_allocated"),
        ("torch.cuda.max_memory_allocated", "torch.cuda.max_memory_allocated"),
    )
    new, _ = port_module.port_source(FIRST_HOUR, rows)
    ast.parse(new)
    lines = new.splitlines()
    assert "import sys" not in lines  # its one use went with the guard
    assert lines[0] == "import torch"
    helpers_end = max(i for i, line in enumerate(lines) if line == "    return _HostEvent()")
    assert lines[helpers_end + 1 : helpers_end + 3] == ["", ""]  # two blank lines, not three
    assert lines[helpers_end + 3].startswith(MARK)
    comments = [line for line in lines if line.lstrip().startswith("#")]
    assert comments
    assert all(len(line) <= COMMENT_WIDTH for line in comments), comments
    continued = [line for line in comments if line.lstrip().startswith("#   ")]
    assert continued  # the long ones went on over several lines, at their statement's indent
    assert all(line.startswith("    #   ") for line in continued if "stand-in" in line)
    read_back = unwrapped(new)
    assert (
        f"    {MARK} without an accelerator `torch.accelerator.memory_allocated()` is 0 here (a "
        "stand-in, not a measurement); guard what is computed from it\n" in read_back
    )


def test_an_import_the_rest_of_the_file_uses_stays() -> None:
    source = (
        "import sys\nimport torch\n"
        'if not torch.cuda.is_available():\n    sys.exit("needs CUDA")\n'
        "print(sys.argv)\n"
    )
    new, _ = port_source(source, entries_for(source, ("torch.cuda.is_available", "torch.cuda")))
    assert new.startswith("import sys\nimport torch\n")
