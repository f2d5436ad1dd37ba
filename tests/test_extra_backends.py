"""The seam between the core and a backend registered from outside it
(:mod:`torchdevice.extra_backends`): the host probe finds the simulated device only through
what it announced."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from childenv import clean_env
from torchdevice import extra_backends
from torchdevice.extra_backends import ExtraBackend
from torchdevice.host import Host, forced_host, probe_host

SRC = pathlib.Path(extra_backends.__file__).parent


@pytest.fixture
def announcements(monkeypatch: pytest.MonkeyPatch) -> dict[str, ExtraBackend]:
    """The registry, emptied for the test and restored after it."""
    registry: dict[str, ExtraBackend] = {}
    monkeypatch.setattr(extra_backends, "_announced", registry)
    return registry


def _fake(started: list[str], *, fails: bool = False) -> ExtraBackend:
    def start() -> str:
        if fails:
            raise RuntimeError("no C++ compiler found")
        started.append("fakegpu")
        return "fakegpu"

    return ExtraBackend(
        choice="fake-mps",
        stands_for="mps",
        start=start,
        device_type=lambda: started[0] if started else None,
    )


@pytest.mark.skipif(probe_host().kind == "mps", reason="the machine is an MPS host itself")
def test_an_mps_host_runs_on_a_started_backend_that_stands_for_mps(
    announcements: dict[str, ExtraBackend],
) -> None:
    started: list[str] = []
    extra_backends.announce(_fake(started))
    with pytest.raises(ValueError, match="host 'mps' needs an Apple GPU"):
        forced_host("mps")  # announced, not started: nothing stands for MPS yet
    assert forced_host("fake-mps") == Host.simulated("fakegpu")  # type: ignore[arg-type]
    assert started == ["fakegpu"]
    host = forced_host("mps")
    assert host == Host.simulated("fakegpu")
    assert (host.kind, host.device_type) == ("mps", "fakegpu")


def test_a_backend_that_cannot_start_is_a_value_error_naming_the_choice(
    announcements: dict[str, ExtraBackend],
) -> None:
    extra_backends.announce(_fake([], fails=True))
    with pytest.raises(ValueError, match="host 'fake-mps' cannot start: no C\\+\\+ compiler found"):
        forced_host("fake-mps")  # type: ignore[arg-type]


def test_a_choice_nobody_announced_is_refused(announcements: dict[str, ExtraBackend]) -> None:
    with pytest.raises(ValueError, match="no backend is announced for host 'other-mps'"):
        forced_host("other-mps")  # type: ignore[arg-type]


def test_the_simulated_device_is_found_through_its_entry_point_only_when_asked() -> None:
    """In a fresh process: ``import torchdevice`` reads no entry points and imports no
    provider; asking the registry for ``"simulated-mps"`` loads the ``torchdevice.backends``
    entry point, which announces the simulated device without registering it (no C++
    build)."""
    code = textwrap.dedent(
        """
        import sys
        import torchdevice
        from torchdevice import extra_backends
        assert "torchdevice.simulated_mps" not in sys.modules
        assert "torchdevice.testing" not in sys.modules
        assert extra_backends._declared.cache_info().currsize == 0
        backend = extra_backends.announced("simulated-mps")
        assert "torchdevice.simulated_mps" in sys.modules
        assert "torchdevice.testing" not in sys.modules
        print(backend.choice, backend.stands_for, backend.device_type(),
              extra_backends.running("mps"), extra_backends.choices())
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["simulated-mps", "mps", "None", "None", "('simulated-mps',)"]


def test_the_package_declares_the_simulated_device_in_the_entry_point_group() -> None:
    """pyproject.toml's ``torchdevice.backends`` group, as the installed metadata has it."""
    from importlib.metadata import entry_points

    declared = {entry.name: entry.value for entry in entry_points(group=extra_backends.GROUP)}
    assert declared["simulated-mps"] == "torchdevice.simulated_mps:extra_backend"


class _Entry:
    """An entry point as :func:`importlib.metadata.entry_points` gives one."""

    def __init__(self, name: str, factory: object) -> None:
        self.name = name
        self.value = f"tests:{name}"
        self.loaded = 0
        self._factory = factory

    def load(self) -> object:
        self.loaded += 1
        return self._factory


def test_another_distribution_announces_a_backend_through_the_group(
    announcements: dict[str, ExtraBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[str] = []
    entry = _Entry("fake-mps", lambda: _fake(started))
    monkeypatch.setattr(extra_backends, "_declared", lambda: {"fake-mps": entry})
    assert extra_backends.choices() == ("fake-mps",)
    assert entry.loaded == 0  # listing the choices imports no provider
    assert forced_host("fake-mps") == Host.simulated("fakegpu")  # type: ignore[arg-type]
    assert (entry.loaded, started) == (1, ["fakegpu"])
    assert extra_backends.announced("fake-mps") is announcements["fake-mps"]
    assert entry.loaded == 1  # loaded once, then announced


def test_an_entry_point_that_gives_no_backend_for_its_choice_is_a_type_error(
    announcements: dict[str, ExtraBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = _Entry("other-mps", lambda: _fake([]))  # announces "fake-mps", not "other-mps"
    monkeypatch.setattr(extra_backends, "_declared", lambda: {"other-mps": entry})
    with pytest.raises(
        TypeError,
        match=r"^the 'torchdevice.backends' entry point 'other-mps' \(tests:other-mps\) "
        r"must return an ExtraBackend for host 'other-mps', and returned "
        r"ExtraBackend\(choice='fake-mps'",
    ):
        extra_backends.announced("other-mps")
    assert announcements == {}


def test_the_core_names_no_provider() -> None:
    """Only the entry-point group says where a backend comes from: no module of the core
    (the simulated package and the test helpers aside) imports it, or names it in a string
    (``importlib.import_module("torchdevice.simulated_mps")``); docstrings may mention it."""
    offenders = [
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if path.parts[len(SRC.parts)] not in {"testing", "simulated_mps"}
        and any(
            needle in path.read_text(encoding="utf-8")
            for needle in (
                "from torchdevice.simulated_mps",
                "import torchdevice.simulated_mps",
                "import simulated_mps",
                '"torchdevice.simulated_mps',
                "'torchdevice.simulated_mps",
                "torchdevice.testing import",
                "import testing",
            )
        )
    ]
    assert offenders == []


# -- a backend another distribution declares, end to end ------------------------------------

#: The provider module of a distribution that is not torchdevice: the simulated device
#: under a host choice of its own, so that nothing in torchdevice knows its name.
DUMMY_PROVIDER = '''\
"""A backend another distribution ships, declared in the torchdevice.backends group."""
import os
from torchdevice.extra_backends import ExtraBackend
from torchdevice.simulated_mps import extra_backend as simulated


def extra_backend():
    inner = simulated()

    def start():
        os.environ["DUMMY_BACKEND_STARTED_IN"] = str(os.getpid())  # what the child inherits
        return inner.start()

    return ExtraBackend(
        choice="dummy-mps", stands_for="mps", start=start, device_type=inner.device_type
    )
'''

#: CUDA-first code that starts a child process; each process says where "cuda" went, and
#: whether it is this process that started the dummy backend.
DUMMY_SCRIPT = """\
import os, subprocess, sys
{activate}
import torch
CHILD = (
    "import os, sys, torch; y = torch.zeros(1, device='cuda') + 1; "
    "print('child', y.device, y.tolist(), os.environ['TORCHDEVICE_HOST'], "
    "os.environ['DUMMY_BACKEND_STARTED_IN'] == str(os.getpid()))"
)
x = torch.ones(2, device="cuda") * 2
started_here = os.environ.get("DUMMY_BACKEND_STARTED_IN") == str(os.getpid())
print("parent", x.device, x.tolist(), started_here)
sys.stdout.flush()
subprocess.run([sys.executable, "-c", CHILD], check=True)
"""


@pytest.fixture
def dummy_site(tmp_path: pathlib.Path) -> pathlib.Path:
    """A tiny installed distribution on a folder for PYTHONPATH: its provider module and a
    ``*.dist-info`` whose ``entry_points.txt`` declares ``dummy-mps`` (all that
    :mod:`importlib.metadata` needs to find it)."""
    site = tmp_path / "site"
    info = site / "dummy_backend-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: dummy-backend\nVersion: 1.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        f"[{extra_backends.GROUP}]\ndummy-mps = dummy_backend:extra_backend\n", encoding="utf-8"
    )
    (site / "dummy_backend.py").write_text(DUMMY_PROVIDER, encoding="utf-8")
    return site


def _dummy_run(
    tmp_path: pathlib.Path, site: pathlib.Path, args: list[str], activate: str = "", **env: str
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "train.py"
    script.write_text(DUMMY_SCRIPT.format(activate=activate), encoding="utf-8")
    environ = clean_env(**env)
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, *args, str(script)],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "activate", "env"),
    [
        ([], 'import torchdevice; torchdevice.enable(host="dummy-mps")', {}),
        (["-m", "torchdevice", "--no-report", "--host", "dummy-mps"], "", {}),
        ([], "", {"ACTIVATE_TORCH_DEVICE": "1", "TORCHDEVICE_HOST": "dummy-mps"}),
    ],
    ids=["enable-argument", "launcher-flag", "environment"],
)
def test_a_backend_declared_by_another_distribution_is_a_host_choice_its_children_get(
    tmp_path: pathlib.Path,
    dummy_site: pathlib.Path,
    args: list[str],
    activate: str,
    env: dict[str, str],
) -> None:
    """The door is open all the way: a distribution torchdevice knows nothing of declares
    ``dummy-mps``; the host setting takes it from an argument, the launcher's flag and the
    environment; the child process gets the choice (``TORCHDEVICE_HOST``) and starts the
    backend itself, from the entry point; "cuda" lands on its device in both, with the
    numbers a CUDA run gives."""
    done = _dummy_run(tmp_path, dummy_site, args, activate, **env)
    assert done.returncode == 0, done.stdout + done.stderr
    parent, child = done.stdout.splitlines()
    assert parent.split() == ["parent", "simgpu:0", "[2.0,", "2.0]", "True"], done.stdout
    assert child.split() == ["child", "simgpu:0", "[1.0]", "dummy-mps", "True"], done.stdout


def test_every_door_lists_the_declared_choices(
    tmp_path: pathlib.Path, dummy_site: pathlib.Path
) -> None:
    """The settings and the launcher's ``--host`` refuse a choice no distribution declares
    and name those that are (the kinds, torchdevice's own backend and the dummy one)."""
    expected = "'cpu', 'mps', 'cuda', 'dummy-mps', 'simulated-mps'"
    flag = _dummy_run(tmp_path, dummy_site, ["-m", "torchdevice", "--host", "nowhere"])
    assert flag.returncode == 2, flag.stderr
    assert f"argument --host: invalid choice: 'nowhere' (choose from {expected})" in flag.stderr
    setting = _dummy_run(
        tmp_path, dummy_site, [], "import torchdevice; torchdevice.enable(host='nowhere')"
    )
    assert setting.returncode == 1
    assert (
        "torchdevice.errors.SettingsError: invalid host='nowhere' passed as an argument: "
        "expected 'cpu', 'mps', 'cuda', 'dummy-mps' or 'simulated-mps'"
    ) in setting.stderr, setting.stderr
    assert "simgpu" not in setting.stdout + setting.stderr  # refused before any backend started


def test_the_core_spells_no_backend_name() -> None:
    """The simulated device's host choice is spelled in its package and in pyproject.toml
    only: the settings, the command lines, the host probe and the hand-over to children
    take whatever the entry points declare."""
    offenders = [
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if path.parts[len(SRC.parts)] not in {"testing", "simulated_mps"}
        and any(
            name in path.read_text(encoding="utf-8") for name in ("simulated-mps", "simulated_mps")
        )
    ]
    assert offenders == []
