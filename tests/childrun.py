"""Run a test module in a child pytest process and mirror its outcomes in the parent.

Registering the simulated accelerator (``torchdevice.simulated_mps.register``) is permanent and
process-wide, so modules that need it run themselves once in a fresh interpreter with
``TORCHDEVICE_SIMGPU_CHILD=1``; each parent-side test reports its own case's outcome.

Use at the end of a module::

    mirror_in_parent(globals())
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

CHILD_FLAG = "TORCHDEVICE_SIMGPU_CHILD"
IN_CHILD = os.environ.get(CHILD_FLAG) == "1"


def _outcomes(junit: Path) -> dict[str, str]:
    """Each child test case's outcome: "" when it passed, else the failure text."""
    outcomes = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        problems = [child for child in case if child.tag in {"failure", "error", "skipped"}]
        outcomes[case.get("name", "")] = "\n".join(
            f"{p.tag}: {p.get('message', '')}\n{p.text or ''}" for p in problems
        )
    return outcomes


def _run_child(module_file: str, tmp: Path) -> dict[str, str]:
    junit = tmp / "junit.xml"
    command = [sys.executable]
    if sys.flags.dev_mode:
        command += ["-X", "dev"]
    command += [
        "-m",
        "pytest",
        module_file,
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit}",
        "-W",
        "error::DeprecationWarning",
    ]
    env = {**os.environ, CHILD_FLAG: "1"}
    completed = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    if not junit.exists():
        pytest.fail(
            f"the child pytest run produced no report:\n{completed.stdout}\n{completed.stderr}"
        )
    return _outcomes(junit)


def _from_child(name: str) -> Callable[..., None]:
    """A parent-side test that reports how ``name`` (all its parameters) did in the child."""

    def from_child(child_run: dict[str, str]) -> None:
        cases = {k: v for k, v in child_run.items() if k == name or k.startswith(f"{name}[")}
        assert cases, f"{name} did not run in the child process"
        failed = {k: v for k, v in cases.items() if v}
        if failed:
            pytest.fail("\n\n".join(f"{k}:\n{v}" for k, v in failed.items()), pytrace=False)

    from_child.__name__ = name
    from_child.__doc__ = f"{name}, run in a child process that registered the simulated device."
    return from_child


def mirror_in_parent(namespace: dict[str, Any]) -> None:
    """In the parent process, replace every ``test_*`` of the module by its child outcome."""
    if IN_CHILD:
        return
    module_file = namespace["__file__"]

    @pytest.fixture(scope="module")
    def child_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
        """Run the module's tests once, in a fresh interpreter that registers the backend."""
        return _run_child(module_file, tmp_path_factory.mktemp("child"))

    namespace["child_run"] = child_run
    for name in [name for name in namespace if name.startswith("test_")]:
        namespace[name] = _from_child(name)
