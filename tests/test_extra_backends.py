"""The seam between the core and a backend registered from outside it
(:mod:`torchdevice.extra_backends`): the host probe finds the simulated device only through
what it announced."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap

import pytest

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


def test_the_simulated_device_announces_itself_when_its_provider_is_imported() -> None:
    """In a fresh process: asking the registry for ``"simulated-mps"`` imports the provider,
    which announces the simulated device without registering it (no C++ build)."""
    code = textwrap.dedent(
        """
        import sys
        import torchdevice
        from torchdevice import extra_backends
        assert "torchdevice.testing" not in sys.modules
        backend = extra_backends.announced("simulated-mps")
        assert "torchdevice.testing" in sys.modules
        print(backend.choice, backend.stands_for, backend.device_type(),
              extra_backends.running("mps"))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["simulated-mps", "mps", "None", "None"]


def test_the_core_names_no_provider_but_in_the_registry_table() -> None:
    """Only :data:`~torchdevice.extra_backends.PROVIDERS` says where a backend comes from;
    the rest of the core (the testing package aside) never imports or looks it up."""
    offenders = [
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if path.parts[len(SRC.parts)] != "testing"
        and path.name != "extra_backends.py"
        and any(
            needle in path.read_text(encoding="utf-8")
            for needle in ("import testing", "torchdevice.testing import", "testing.simulated")
        )
    ]
    assert offenders == []
