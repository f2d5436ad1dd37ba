"""Every Python child of a redirected run is redirected (issue 10, item 1).

The mechanism is the ``.pth`` file shipped at the root of ``site-packages``
(``src/torchdevice-activate.pth``), which imports :mod:`_torchdevice_startup` when an
activation variable is set; torchdevice then enables itself right after ``import torch``.

The children here must run the real ``.pth`` line even where the installed torchdevice is
not this source tree's (a worktree on ``PYTHONPATH``): every child gets a ``sitecustomize``
that adds a directory holding a copy of the shipped file as a site directory, exactly as
the interpreter reads ``site-packages``. In an install of this tree (CI's ``pip install
-e .``), :func:`test_the_install_ships_the_pth` checks the file is really there and active.

The end-to-end scripts in ``tests/children/`` are written as users write them: no
torchdevice in them, ``"cuda"`` hard-coded.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
import torch

import _torchdevice_startup as startup
import torchdevice
from childenv import tier_env
from torchdevice import SettingsError
from torchdevice.environment import BOOL_EXPECTED, FALSE_WORDS
from torchdevice.host import Host, probe_host
from torchdevice.redirecting.policy import decide

ROOT = Path(__file__).resolve().parents[1]
PTH = ROOT / "src" / startup.PTH_NAME
SCRIPTS = Path(__file__).resolve().parent / "children"
TORCHRUN = Path(sys.executable).with_name("torchrun")
HOST = probe_host()


def _lands(request: str) -> str:
    """Where a tensor requested on ``request`` lands on this machine, as ``str(t.device)``."""
    device = decide(request, HOST).device
    assert device is not None
    return "cpu" if device.type == "cpu" else f"{device.type}:{device.index or 0}"


def _clean_env() -> dict[str, str]:
    """os.environ without anything that switches torchdevice on or configures it."""
    return {
        name: value
        for name, value in os.environ.items()
        if name not in {"ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS"}
        and not name.startswith("TORCHDEVICE_")
    }


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A site directory holding a copy of the shipped ``.pth``, and a ``sitecustomize``
    (in ``boot/``) that adds it in every interpreter started with ``boot`` on the path."""
    base = tmp_path_factory.mktemp("children")
    site_dir = base / "site"
    site_dir.mkdir()
    shutil.copy(PTH, site_dir / startup.PTH_NAME)
    (base / "boot").mkdir()
    (base / "boot" / "sitecustomize.py").write_text(
        f"import site\nsite.addsitedir({str(site_dir)!r})\n"
    )
    yield site_dir
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def child_env(site_dir: Path) -> dict[str, str]:
    """A clean environment whose interpreters all read the shipped ``.pth``."""
    env = _clean_env()
    boot = str(site_dir.parent / "boot")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [boot, env.get("PYTHONPATH")]))
    return env


def run(command: list[str | Path], env: dict[str, str], timeout: float = 240) -> str:
    """Run ``command`` in its own process group and return its stdout; fail on an error.

    The whole group is killed afterwards, so no grandchild (pool worker, torchrun rank)
    outlives the test, whatever happened. Under the ``tier`` fixture the command runs in
    that tier.
    """
    env = {**env, **tier_env()}
    if command[0] == "python":
        command = [sys.executable, *(["-X", "dev"] if sys.flags.dev_mode else []), *command[1:]]
    process = subprocess.Popen(
        [str(part) for part in command],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
    assert process.returncode == 0, f"{command} failed ({process.returncode}):\n{out}\n{err}"
    return out


def records(out: str) -> dict[str, dict[str, object]]:
    """The JSON records the scripts print, by who printed them (ranks may share a line)."""
    found = [json.loads(text) for text in re.findall(r'\{"who": [^{}]*\}', out)]
    by_who = {record["who"]: record for record in found}
    assert len(by_who) == len(found), f"a process printed twice:\n{out}"
    return by_who


# --- the .pth line and the hook -------------------------------------------------------------

_SNAPSHOT = (
    "import json, sys, site; sys.path.append({src!r}); before = set(sys.modules); "
    "site.addsitedir({site!r}); "
    "hooks = [f for f in sys.meta_path if type(f).__name__ == 'TorchImportHook']; "
    "{extra}print(json.dumps([sorted(set(sys.modules) - before), len(hooks)]))"
)


def _snapshot(site_dir: Path, env: dict[str, str], extra: str = "") -> list[object]:
    """Modules the .pth line imported and hooks it installed, in a fresh ``python -S``."""
    src = os.path.dirname(startup.__file__)  # -S: no site-packages, so no editable path
    code = _SNAPSHOT.format(src=src, site=str(site_dir), extra=extra)
    result: list[object] = json.loads(run(["python", "-S", "-c", code], env))
    return result


@pytest.mark.parametrize(
    ("variables", "imported", "hooks"),
    [
        pytest.param({}, [], 0, id="unset: no import"),
        pytest.param({"ACTIVATE_TORCH_DEVICE": "0"}, ["_torchdevice_startup"], 0, id="0"),
        pytest.param({"TORCH_ALLOW_REDIRECTS": "no"}, ["_torchdevice_startup"], 0, id="allow-no"),
        pytest.param({"ACTIVATE_TORCH_DEVICE": "1"}, ["_torchdevice_startup"], 1, id="1"),
        pytest.param({"TORCH_ALLOW_REDIRECTS": "True"}, ["_torchdevice_startup"], 1, id="allow"),
    ],
)
def test_the_pth_line_costs_nothing_until_torch(site_dir, variables, imported, hooks):
    """Unset: nothing is imported. Set: only the hook module (no torch, no torchdevice)."""
    env = {**_clean_env(), **variables}
    assert _snapshot(site_dir, env) == [imported, hooks]


def test_the_hook_installs_once_and_an_invalid_value_does_not_break_start_up(site_dir):
    env = {**_clean_env(), "ACTIVATE_TORCH_DEVICE": "maybe"}
    twice = "import _torchdevice_startup as s; s.install(); s.install(); "
    # the hook is there (the import of torch will report the value), and start-up went on
    assert _snapshot(site_dir, env, twice) == [["_torchdevice_startup"], 1]


def test_a_bad_value_is_reported_when_torch_is_imported(site_dir):
    env = {**_clean_env(), "ACTIVATE_TORCH_DEVICE": "maybe"}
    code = f"import site; site.addsitedir({str(site_dir)!r}); import torch"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2  # a usage error, in one line (issue 28)
    assert result.stderr.strip().splitlines() == [
        "torchdevice: error: invalid ACTIVATE_TORCH_DEVICE='maybe' from the "
        f"environment: {BOOL_EXPECTED}"
    ]


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, False),
        ({"ACTIVATE_TORCH_DEVICE": "1"}, True),
        ({"ACTIVATE_TORCH_DEVICE": " 0 "}, False),
        ({"ACTIVATE_TORCH_DEVICE": ""}, False),
        ({"ACTIVATE_TORCH_DEVICE": "on"}, True),
        ({"ACTIVATE_TORCH_DEVICE": "maybe"}, True),  # invalid: torchdevice's import reports it
        ({"ACTIVATE_TORCH_DEVICE": "Off"}, False),
        ({"TORCH_ALLOW_REDIRECTS": "TRUE"}, True),
        ({"TORCH_ALLOW_REDIRECTS": "1"}, True),
        ({"TORCH_ALLOW_REDIRECTS": "false"}, False),
    ],
)
def test_requested(environ, expected):
    assert startup.requested(environ) is expected


def test_the_hook_knows_the_packages_false_words():
    """The hook keeps its own copy of the words that mean "off" (it cannot import the
    package at interpreter start): the copy must say what the one rule says."""
    assert FALSE_WORDS | {""} == startup.FALSE_WORDS


def test_the_hook_wraps_only_torch_and_leaves_after_one_use(monkeypatch):
    hook = startup.TorchImportHook()
    monkeypatch.setattr(sys, "meta_path", [hook, *sys.meta_path])
    assert hook.find_spec("numpy") is None
    assert hook in sys.meta_path
    spec = hook.find_spec("torch")
    assert hook not in sys.meta_path
    assert spec is not None
    assert spec.origin == torch.__file__
    assert spec.loader.get_filename("torch") == torch.__spec__.loader.get_filename("torch")
    assert type(spec.loader).__name__ == "_ActivatingLoader"


# --- settings travel in the environment ------------------------------------------------------


def _exported() -> dict[str, str]:
    """The settings in the environment (the report-parts directory is the report's own
    variable, tested in test_report_parts.py)."""
    names = {"ACTIVATE_TORCH_DEVICE", "TORCH_ALLOW_REDIRECTS"}
    return {
        k: v
        for k, v in os.environ.items()
        if (k in names or k.startswith("TORCHDEVICE_")) and k != "TORCHDEVICE_REPORT_PARTS"
    }


def test_enable_exports_what_children_need_and_disable_restores_it(monkeypatch, tmp_path):
    for name in _exported():
        monkeypatch.delenv(name)
    monkeypatch.setenv("ACTIVATE_TORCH_DEVICE", "0")
    report = tmp_path / "r.json"
    torchdevice.enable(
        keep_cpu=True,
        log_level="info",
        fallback=False,
        cuda_available=False,
        report_path=report,
        host="cpu",
        cpu_override=True,
    )
    assert _exported() == {
        "ACTIVATE_TORCH_DEVICE": "1",
        "TORCHDEVICE_KEEP_CPU": "1",
        "TORCHDEVICE_LOG_LEVEL": "info",
        "TORCHDEVICE_FALLBACK": "0",
        "TORCHDEVICE_CUDA_AVAILABLE": "0",
        "TORCHDEVICE_REPORT": str(report),
        "TORCHDEVICE_HOST": "cpu",
        "TORCHDEVICE_WRITTEN_FOR": "cuda",  # read from this module (torchdevice.program)
    }
    # a bad reconfiguration changes nothing: the activation and its exports stay
    with pytest.raises(SettingsError, match="invalid log_level='LOUD'"):
        torchdevice.enable(log_level="LOUD")
    assert _exported()["TORCHDEVICE_KEEP_CPU"] == "1"
    # reconfiguring drops what the previous call exported: it is not the user's environment
    torchdevice.enable()
    story = {"TORCHDEVICE_WRITTEN_FOR": "cuda"}  # what the program is travels always
    assert _exported() == {"ACTIVATE_TORCH_DEVICE": "1", **story}
    rt = torchdevice.activation.current_runtime()
    assert rt is not None
    assert not rt.settings.keep_cpu
    with torchdevice.redirect(keep_cpu=True):
        assert _exported() == {
            "ACTIVATE_TORCH_DEVICE": "1",
            "TORCHDEVICE_KEEP_CPU": "1",
            **story,
        }
    assert _exported() == {"ACTIVATE_TORCH_DEVICE": "1", **story}
    torchdevice.disable()
    assert _exported() == {"ACTIVATE_TORCH_DEVICE": "0"}


def test_a_host_a_child_could_not_be_does_not_travel(monkeypatch):
    monkeypatch.delenv("TORCHDEVICE_HOST", raising=False)
    pretend = Host.mps() if HOST.kind != "mps" else Host.cuda(2)
    torchdevice.enable(host=pretend)
    assert "TORCHDEVICE_HOST" not in os.environ
    torchdevice.enable(host=Host.cpu())
    assert os.environ["TORCHDEVICE_HOST"] == "cpu"


# --- launch forms, end to end ----------------------------------------------------------------


def _assert_redirected(record: dict[str, object], request: str = "cuda") -> None:
    assert record["device"] == _lands(request), record
    assert record["cuda"] is True, record


@pytest.mark.usefixtures("tier")
def test_python_m_torchdevice_redirects_every_kind_of_child(child_env):
    """subprocess, spawn Pool, DataLoader (fork and spawn, pin_memory), os.fork, mp fork."""
    by_who = records(run(["python", "-m", "torchdevice", SCRIPTS / "start_children.py"], child_env))
    assert sorted(by_who) == sorted(
        [
            "parent",
            "subprocess",
            "pool-0",
            "pool-1",
            "loader-fork",
            "loader-spawn",
            "os-fork",
            "mp-fork",
        ]
    )
    for who in ("parent", "subprocess", "pool-0", "pool-1", "os-fork", "mp-fork"):
        _assert_redirected(by_who[who])
    for who in ("pool-0", "pool-1", "os-fork", "mp-fork"):
        assert by_who[who]["sum"] == 4.0
    for context in ("fork", "spawn"):
        loader = by_who[f"loader-{context}"]
        assert loader["values"] == [0.0, 1.0, 4.0, 9.0]
        assert loader["worker_devices"] == [_lands("cuda")]
        assert loader["worker_cuda"] == [True]
        assert loader["device"] == _lands("cuda")


@pytest.mark.usefixtures("tier")
def test_activate_torch_device_redirects_an_unmodified_script_and_its_children(child_env):
    env = {**child_env, "ACTIVATE_TORCH_DEVICE": "1", "ONLY": "subprocess"}
    by_who = records(run(["python", SCRIPTS / "start_children.py"], env))
    assert sorted(by_who) == ["parent", "subprocess"]
    _assert_redirected(by_who["parent"])
    _assert_redirected(by_who["subprocess"])


@pytest.mark.skipif(
    HOST.kind == "cuda" and HOST.cuda_device_count < 2, reason="ranks use cuda:0 and cuda:1"
)
@pytest.mark.parametrize(
    "form",
    [
        pytest.param(["ACTIVATE_TORCH_DEVICE=1", TORCHRUN], id="ACTIVATE_TORCH_DEVICE=1 torchrun"),
        pytest.param(
            ["python", "-m", "torchdevice", "-m", "torch.distributed.run"],
            id="python -m torchdevice -m torch.distributed.run",
        ),
        pytest.param([TORCHRUN, "<args>", "-m", "torchdevice"], id="torchrun -m torchdevice"),
    ],
)
@pytest.mark.usefixtures("tier")
def test_torchrun_workers_are_redirected(child_env, form):
    env = dict(child_env)
    if form[0] == "ACTIVATE_TORCH_DEVICE=1":
        env["ACTIVATE_TORCH_DEVICE"] = "1"
        form = form[1:]
    args = ["--standalone", "--nproc_per_node=2"]
    if "<args>" in form:
        at = form.index("<args>")
        command = [*form[:at], *args, *form[at + 1 :]]
    else:
        command = [*form, *args]
    by_who = records(run([*command, SCRIPTS / "ranks.py"], env))
    assert sorted(by_who) == ["rank-0", "rank-1"]
    _assert_redirected(by_who["rank-0"], "cuda:0")
    _assert_redirected(by_who["rank-1"], "cuda:1")


# --- the real install ------------------------------------------------------------------------


def _installed_from_this_tree(dist: importlib.metadata.Distribution) -> bool:
    """Whether the installed torchdevice is the one under test (editable or not)."""
    here = Path(torchdevice.__file__).resolve().parent
    direct_url = dist.read_text("direct_url.json")
    if direct_url:
        info = json.loads(direct_url)
        if info.get("dir_info", {}).get("editable"):
            tree = Path(unquote(urlparse(info["url"]).path))
            return (tree / "src" / "torchdevice").resolve() == here
    return Path(str(dist.locate_file("torchdevice/__init__.py"))).resolve().parent == here


def test_the_install_ships_the_pth():
    """In an install of this tree (CI: ``pip install -e .``) the .pth is in site-packages,
    is this tree's, and is active: a child with the variable set gets the hook."""
    dist = importlib.metadata.distribution("torchdevice")
    if not _installed_from_this_tree(dist):
        pytest.skip(f"the installed torchdevice is not this tree ({torchdevice.__file__})")
    files = {str(file): file for file in dist.files or []}
    assert startup.PTH_NAME in files, sorted(files)
    installed = Path(str(dist.locate_file(files[startup.PTH_NAME])))
    assert installed.read_text() == PTH.read_text()
    assert installed.parent.resolve() in {Path(p).resolve() for p in sys.path}
    code = "import sys; print([type(f).__name__ for f in sys.meta_path][0])"
    env = {**_clean_env(), "ACTIVATE_TORCH_DEVICE": "1"}
    assert run(["python", "-c", code], env).strip() == "TorchImportHook"
