"""What the program is written for is read from the program, not from who asks first.

Transformers asks ``torch.backends.mps.is_available()`` while it is imported, from code
that names no accelerator; when the first asker decided, importing it first made a CUDA
script MPS code (issue 29). The story is now read when torchdevice is switched on: the
``written_for`` option, else the script the launcher runs, the module that calls
``enable()``, or ``__main__`` (docs/facade.md, "Which program it is").
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torchdevice
from childenv import clean_env
from torchdevice import program

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "scripts"
CPU_HOST = not torch.cuda.is_available() and not torch.backends.mps.is_available()
needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers is not installed"
)
cpu_host_only = pytest.mark.skipif(not CPU_HOST, reason="the facades' story off GPU hosts")


def read(source: str) -> program.Reading:
    return program.of_code(compile(source, "prog.py", "exec"), "prog.py")


# -- reading a program ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "written_for"),
    [
        ("import torch\nx = torch.ones(2, device='cuda')\n", "cuda"),
        ("import torch\nx = torch.ones(2).to('cuda:1')\n", "cuda"),
        ("import torch\nif torch.cuda.is_available(): pass\n", "cuda"),
        ("from lightning.pytorch.accelerators import CUDAAccelerator\n", "cuda"),
        # considers MPS, but names CUDA: on its CUDA machine it hears "no MPS"
        ("import torch\nd = 'mps' if torch.backends.mps.is_available() else 'cuda'\n", "cuda"),
        # CUDA named only inside a function, a class, a comprehension
        ("def f():\n    return 'cuda'\n", "cuda"),
        ("class M:\n    def to_gpu(self, t):\n        return t.cuda()\n", "cuda"),
        ("xs = [t.to('cuda:0') for t in ()]\n", "cuda"),
        ("import torch\nx = torch.ones(2, device='mps')\n", "mps"),
        ("import torch\nok = torch.backends.mps.is_available()\n", "mps"),
        ("from transformers.utils import is_torch_mps_available\n", "mps"),
        ("from lightning.pytorch.accelerators import MPSAccelerator\n", "mps"),
        ("x = 'mps:0'\n", "mps"),
        # names neither: the accelerator a CPU-only host stands for
        ("import torch\nd = torch.accelerator.current_accelerator()\n", "cuda"),
        ("import json\ntext = json.dumps({'timestamps': 1})\n", "cuda"),  # dumps is no MPS
        ("x = 'cudaless string'\n", "cuda"),  # not a CUDA name either: the default
    ],
)
def test_a_program_is_read_by_what_it_names(source, written_for):
    assert read(source).written_for == written_for


def test_the_reading_says_why():
    assert read("x = 'mps'\n").source == "prog.py names MPS and not CUDA"
    assert read("x = 'cuda'\n").source == "prog.py names CUDA"
    assert read("x = 1\n").source == "prog.py names no accelerator"


def test_a_script_file_a_directory_app_and_a_missing_source(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch\nx = torch.zeros(1, device='mps')\n")
    assert program.of_script(str(script)) == program.Reading(
        "mps", f"{script} names MPS and not CUDA"
    )
    app = tmp_path / "app"
    app.mkdir()
    (app / "__main__.py").write_text("import torch\ntorch.cuda.synchronize()\n")
    assert program.of_script(str(app)).written_for == "cuda"
    assert program.of_script(str(tmp_path / "none.py")).written_for == "cuda"
    (tmp_path / "broken.py").write_text("def (:\n")
    assert program.of_script(str(tmp_path / "broken.py")).source.startswith("no Python source")


def test_a_script_edited_between_runs_is_read_again(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("x = 'mps'\n")
    assert program.of_script(str(script)).written_for == "mps"
    script.write_text("x = 'cuda'  # now a CUDA script\n")
    os.utime(script, (1, 1))  # a different modification time, whatever the clock's grain
    assert program.of_script(str(script)).written_for == "cuda"


def test_a_module_is_read_without_importing_its_package(tmp_path, monkeypatch):
    package = tmp_path / "mpspkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "__main__.py").write_text("import torch\nd = torch.device('mps')\n")
    (package / "tool.py").write_text("import torch\nd = torch.device('cuda')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert program.of_module("mpspkg.sub").written_for == "mps"  # a package runs __main__
    assert program.of_module("mpspkg.tool").written_for == "cuda"
    assert "mpspkg" not in sys.modules
    missing = program.of_module("mpspkg.nothing_here")
    assert missing == program.Reading("cuda", "no Python source for mpspkg.nothing_here")


def test_the_caller_is_the_first_frame_outside_torchdevice():
    """From this module (it names CUDA); from code given to ``exec`` (no file): that code."""
    assert program.of_caller(sys._getframe()).written_for == "cuda"
    namespace: dict[str, object] = {"__name__": "prog", "program": program, "sys": sys}
    exec("reading = program.of_caller(sys._getframe())\nd = 'mps'\n", namespace)
    assert namespace["reading"] == program.Reading("mps", "module prog names MPS and not CUDA")


@cpu_host_only
def test_enable_reads_the_calling_module_and_the_option_wins():
    torchdevice.enable()  # this module names CUDA
    assert torch.backends.mps.is_available() is False
    assert torch.accelerator.current_accelerator() == torch.device("cuda")
    assert os.environ["TORCHDEVICE_WRITTEN_FOR"] == "cuda"  # children tell the same story
    torchdevice.enable(written_for="mps")
    assert torch.backends.mps.is_available() is True
    assert torch.accelerator.current_accelerator() == torch.device("mps")
    assert os.environ["TORCHDEVICE_WRITTEN_FOR"] == "mps"
    torchdevice.disable()
    assert "TORCHDEVICE_WRITTEN_FOR" not in os.environ


# -- the import-order case and the Trainer, as users run them -------------------------------
ASK = "print(torch.backends.mps.is_available(), torch.accelerator.current_accelerator())\n"
TRANSFORMERS_FIRST = "import torch\nimport transformers.integrations.sdpa_attention\n" + ASK
ASK_FIRST = "import torch\n" + ASK + "import transformers.integrations.sdpa_attention\n"


def run(argv: list[str], tmp_path: Path, **env: str) -> str:
    child_env = clean_env(**env)
    child_env.pop("PYTORCH_ENABLE_MPS_FALLBACK", None)  # the child's own libraries set it
    result = subprocess.run(
        [sys.executable, *argv],
        cwd=tmp_path,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


@cpu_host_only
@needs_transformers
@pytest.mark.parametrize(
    ("body", "extra", "env", "expected"),
    [
        pytest.param(
            TRANSFORMERS_FIRST,
            "x = torch.ones(1, device='cuda')\n",
            {},
            "False cuda",
            id="cuda-script-transformers-first",
        ),
        pytest.param(
            ASK_FIRST,
            "x = torch.ones(1, device='cuda')\n",
            {},
            "False cuda",
            id="cuda-script-asks-first",
        ),
        pytest.param(
            TRANSFORMERS_FIRST,
            "x = torch.ones(1, device='mps')\n",
            {},
            "True mps",
            id="mps-script-transformers-first",
        ),
        pytest.param(
            TRANSFORMERS_FIRST,
            "",
            {"TORCHDEVICE_WRITTEN_FOR": "mps"},
            "True mps",
            id="said-by-the-environment",
        ),
    ],
)
def test_the_answer_does_not_depend_on_which_library_asks_first(
    tmp_path, body, extra, env, expected
):
    (tmp_path / "script.py").write_text(body + extra)
    out = run(["-m", "torchdevice", "script.py"], tmp_path, **env)
    assert out.splitlines()[0] == expected


@cpu_host_only
@needs_transformers
def test_the_flag_says_it_and_activation_from_the_environment_reads_main(tmp_path):
    (tmp_path / "script.py").write_text(TRANSFORMERS_FIRST + "x = torch.ones(1, device='cuda')\n")
    flagged = run(["-m", "torchdevice", "--written-for", "mps", "script.py"], tmp_path)
    assert flagged.splitlines()[0] == "True mps"
    (tmp_path / "mps.py").write_text(TRANSFORMERS_FIRST + "x = torch.ones(1, device='mps')\n")
    from_env = run(["mps.py"], tmp_path, ACTIVATE_TORCH_DEVICE="1")
    assert from_env.splitlines()[0] == "True mps"
    command = run(
        ["-c", TRANSFORMERS_FIRST + "torch.cuda.synchronize()"], tmp_path, ACTIVATE_TORCH_DEVICE="1"
    )
    assert command.splitlines()[0] == "False cuda"


@cpu_host_only
@needs_transformers
def test_a_cuda_scripts_trainer_runs_on_the_gpu_it_is_written_for(tmp_path):
    """Transformers imported first: TrainingArguments picks CUDA, not MPS: the loader keeps
    the script's pin_memory=True, with no warning (MPS would warn that pinning is not
    supported); its iterator starts no pin-memory thread, since nothing can be pinned on
    this host (patches/data_loader.py)."""
    out = run(
        ["-m", "torchdevice", str(SCRIPTS / "trainer_device.py"), str(tmp_path / "out")], tmp_path
    )
    facts = json.loads(out.strip().splitlines()[-1])
    assert facts["args_device"] == "cuda:0"
    assert facts["state_device"] == "cuda"
    assert (facts["mps_available"], facts["accelerator"]) == (False, "cuda")
    assert facts["mps_fallback_env"] is None  # Accelerate sets it when it picks MPS
    assert (facts["pin_memory_arg"], facts["loader_pin_memory"]) == (True, True)
    assert facts["iterator_pins"] is False
    assert facts["warnings"] == []  # MPS would warn "'pin_memory' ... not supported on MPS"
