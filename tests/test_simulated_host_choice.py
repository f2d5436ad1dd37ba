"""The simulated MPS host chosen the user's way, in every process of a run.

``TORCHDEVICE_HOST=simulated-mps``, ``--host simulated-mps`` and the pytest plugin's
``--torchdevice-host simulated-mps`` run a program on the simulated MPS device; every child
registers its own device from the environment. Everything runs in child processes: this
pytest process never registers the backend.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from test_children import TORCHRUN, child_env, records, run, site_dir  # noqa: F401 - fixtures

pytest_plugins = ("pytester",)

TESTS = Path(__file__).resolve().parent
SIMULATED = "simgpu:0"

pytestmark = pytest.mark.slow


def _simulated_env(child_env: dict[str, str]) -> dict[str, str]:  # noqa: F811 - the fixture's value
    return {**child_env, "TORCHDEVICE_HOST": "simulated-mps"}


def test_the_launcher_option_reaches_every_kind_of_child(child_env):  # noqa: F811
    """subprocess, spawn Pool, DataLoader workers (fork and spawn, pin_memory), os.fork, mp
    fork: each registers the simulated device and lands "cuda" on it."""
    out = run(
        [
            "python",
            "-m",
            "torchdevice",
            "--no-report",
            "--host",
            "simulated-mps",
            TESTS / "children" / "start_children.py",
        ],
        child_env,
        timeout=600,
    )
    by_who = records(out)
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
    for record in by_who.values():
        assert record["device"] == SIMULATED, record
        assert record.get("cuda", True) is True, record
    for context in ("fork", "spawn"):
        loader = by_who[f"loader-{context}"]
        assert loader["values"] == [0.0, 1.0, 4.0, 9.0]  # batches made on the device in workers
        assert loader["worker_devices"] == [SIMULATED]


def test_the_environment_reaches_torchrun_workers(child_env):  # noqa: F811
    command = [
        TORCHRUN,
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "torchdevice",
        "--no-report",
        TESTS / "children" / "ranks.py",
    ]
    by_who = records(run(command, _simulated_env(child_env), timeout=600))
    assert sorted(by_who) == ["rank-0", "rank-1"]
    assert {record["device"] for record in by_who.values()} == {SIMULATED}  # cuda:n -> mps:0


@pytest.mark.usefixtures("tier")
def test_a_cuda_first_training_script_matches_the_cpu(child_env, tmp_path):  # noqa: F811
    """Checkpoints loaded with map_location="cuda", a deep-copied EMA model, a pickled
    tensor, DataLoader spawn workers with pin_memory=True (the dataset lives on the device,
    so batches do too and are not pinned, as on MPS), torch.compile with the default
    backend and a subprocess child, on the simulated MPS host, with the CPU host's results.
    The compiled forward is aot_eager on the simulated device (eager kernels) and inductor's
    C++ on the CPU host, so it is compared with a tolerance; training is bit for bit."""
    script = TESTS / "scripts" / "cuda_checkpoint.py"
    results = {}
    for host, env in (("simulated", _simulated_env(child_env)), ("cpu", child_env)):
        out = tmp_path / host
        out.mkdir()
        options = [] if host == "simulated" else ["--host", "cpu"]
        run(
            ["python", "-m", "torchdevice", "--no-report", *options, script, out, "spawn"],
            env,
            timeout=600,
        )
        results[host] = json.loads((out / "result.json").read_text())
    simulated, cpu = results["simulated"], results["cpu"]
    assert simulated["devices"] == {
        "model": SIMULATED,
        "loaded": SIMULATED,
        "child": SIMULATED,
        "workers": [SIMULATED, SIMULATED],
    }
    assert cpu["devices"]["model"] == "cpu"
    for key in ("losses", "weights", "ema"):
        assert simulated[key] == cpu[key], key
    assert simulated["pickled_equal"]
    assert simulated["map_location_cpu_equal"]
    assert simulated["compiled_device"] == SIMULATED
    assert cpu["compiled_device"] == "cpu"
    assert simulated["compiled_matches_eager"]
    assert cpu["compiled_matches_eager"]
    assert torch.allclose(
        torch.tensor(simulated["compiled"]), torch.tensor(cpu["compiled"]), rtol=1e-5, atol=1e-6
    )


def test_the_pytest_option_reaches_xdist_workers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import subprocess, sys
        import torch

        def test_on_the_simulated_device():
            assert torch.cuda.is_available()
            assert str(torch.ones(1, device="cuda").device) == "simgpu:0"
            child = subprocess.run(
                [sys.executable, "-c", "import torch; print(torch.ones(1, device='cuda').device)"],
                capture_output=True, text=True, check=True,
            )
            assert child.stdout.strip() == "simgpu:0"
        """
    )
    result = pytester.runpytest_subprocess(
        "-p",
        "xdist",
        "-n",
        "1",
        "-p",
        "no:cacheprovider",
        "--torchdevice-host",
        "simulated-mps",
        timeout=600,
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["torchdevice: redirecting to simgpu:0 (mps host, *"])


def test_compare_runs_only_the_redirected_run_on_the_simulated_host(tmp_path: Path) -> None:
    """``torchdevice compare --host simulated-mps``: the native run stays native (no CUDA
    here, so the test fails there) and only the redirected run lands on the simulated
    device; a ``TORCHDEVICE_HOST`` in compare's environment does not reach the native run."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_where.py").write_text(
        "import torch\n\n"
        "def test_cuda_lands_on_the_simulated_device():\n"
        "    assert str(torch.ones(1, device='cuda').device) == 'simgpu:0'\n"
    )
    env = {**os.environ, "TORCHDEVICE_HOST": "simulated-mps"}
    env.pop("ACTIVATE_TORCH_DEVICE", None)
    for options, output in ((["--host", "simulated-mps"], "by-option"), ([], "by-env")):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "torchdevice",
                "compare",
                "--quiet",
                "--output",
                str(tmp_path / output),
                *options,
                "-p",
                "no:cacheprovider",
                str(suite),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        data = json.loads((tmp_path / output / "compare.json").read_text())
        (test,) = data["tests"]
        assert test["native"]["outcome"] == "failed", test
        assert test["redirected"]["outcome"] == "passed", test
        assert test["category"] == "fixed"
        assert data["host"].startswith("mps host"), data["host"]
        redirected = data["runs"]["redirected"]["command"]
        assert "--torchdevice-host=simulated-mps" in redirected
        assert not any("torchdevice-host" in arg for arg in data["runs"]["native"]["command"])


def test_a_pytest_host_the_machine_cannot_be_is_a_usage_error(pytester: pytest.Pytester) -> None:
    if torch.backends.mps.is_available():
        pytest.skip("this machine can be an MPS host")
    pytester.makepyfile("def test_never_runs():\n    raise AssertionError\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--torchdevice-host", "mps")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: invalid TORCHDEVICE_HOST='mps' from the environment: *"])


def test_without_a_compiler_the_error_is_one_line(tmp_path: Path) -> None:
    script = tmp_path / "marks.py"
    marker = tmp_path / "ran"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("TORCHDEVICE_") and name != "ACTIVATE_TORCH_DEVICE"
    }
    env |= {"CXX": str(tmp_path / "no-such-c++"), "TORCH_EXTENSIONS_DIR": str(tmp_path / "cache")}
    result = subprocess.run(
        [sys.executable, "-m", "torchdevice", "--host", "simulated-mps", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(
        "python -m torchdevice: error: invalid host='simulated-mps' passed as an argument: "
        "host 'simulated-mps' cannot start: the simulated accelerator is compiled from C++ on "
        "first use, and this machine lacks a C++ compiler ("
    ), lines[0]
    assert "no-such-c++" in lines[0]
    assert not marker.exists()


def test_the_build_is_every_source_of_csrc_and_its_fingerprint_covers_the_header(
    tmp_path: Path,
) -> None:
    """The C++ half is several files compiled into one library (``simulated_mps/native.py``):
    every ``.cpp`` of ``csrc/`` is a source, and editing the header they share rebuilds it."""
    import shutil

    from torchdevice.simulated_mps import native

    sources = native.sources()
    assert [path.name for path in sources] == sorted(
        path.name for path in native.source_directory().glob("*.cpp")
    )
    assert {"allocator.cpp", "guard.cpp", "hooks.cpp", "kernels.cpp", "operators.cpp"} <= {
        path.name for path in sources
    }
    copied = tmp_path / "csrc"
    shutil.copytree(native.source_directory(), copied)
    before = native._fingerprint(copied)
    assert native._fingerprint(copied) == before
    header = copied / "simulated.h"
    header.write_text(header.read_text(encoding="utf-8") + "\n// edited\n", encoding="utf-8")
    assert native._fingerprint(copied) != before


def test_this_process_never_registered_the_backend() -> None:
    assert torch._C._get_privateuse1_backend_name() == "privateuseone"
