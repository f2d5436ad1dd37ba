"""The torch.mps facade (MPS-first code on CPU and CUDA hosts) and the MPS-host paths.

On this CPU host the torch.mps facade answers from the CPU for real. The paths that need
an Apple or NVIDIA GPU are checked through an injected host with the real device modules'
functions replaced by recording stand-ins: that verifies which backend call answers each
facade function and that its value comes back unchanged, not the hardware itself.
"""

from __future__ import annotations

import sys
import time

import pytest
import torch

import torchdevice
from torchdevice import Host, UnsupportedFeatureError
from torchdevice.facade import real_device

REAL_MPS = sys.modules["torch.mps"]
CPU = torch.device("cpu")


def test_mps_first_code_runs_on_the_cpu_host():
    torchdevice.enable(written_for="mps")  # this module names CUDA: it says what it is
    assert torch.backends.mps.is_available() is True
    assert torch.backends.mps.is_built() is True
    assert torch.mps.is_available() is True
    assert torch.mps.device_count() == 1
    device = torch.device("mps" if torch.backends.mps.is_available() else "cpu")
    x = torch.ones(3, device=device) * 2
    assert x.device == CPU
    torch.mps.synchronize()
    assert x.tolist() == [2.0, 2.0, 2.0]


def test_mps_rng_seeds_the_real_generator():
    torchdevice.enable()
    torch.mps.manual_seed(42)
    assert torch.default_generator.initial_seed() == 42
    state = torch.mps.get_rng_state()
    a = torch.rand(2, device="mps")
    torch.mps.set_rng_state(state)
    assert torch.equal(torch.rand(2, device="mps"), a)
    assert torch.mps._get_default_mps_generator() is torch.default_generator
    torch.mps.seed()


def test_mps_memory_is_the_hosts():
    torchdevice.enable()
    before = torch.mps.current_allocated_memory()
    x = torch.empty(16 * 2**20, dtype=torch.uint8, device="mps")
    assert torch.mps.current_allocated_memory() - before >= 16 * 2**20
    assert torch.mps.driver_allocated_memory() >= torch.mps.current_allocated_memory()
    assert torch.mps.recommended_max_memory() == torch.cuda.get_device_properties().total_memory
    del x
    torch.mps.empty_cache()
    torch.mps.set_per_process_memory_fraction(0.8)
    assert torch.cuda.get_per_process_memory_fraction() == 0.8
    torch.mps.set_per_process_memory_fraction(1.0)


def test_mps_event_times_a_region():
    torchdevice.enable()
    start, end = torch.mps.Event(enable_timing=True), torch.mps.Event(enable_timing=True)
    assert isinstance(start, torch.mps.Event)
    from torch.mps.event import Event

    assert Event is torch.mps.Event
    start.record()
    time.sleep(0.03)
    end.record()
    end.synchronize()
    assert 29.0 <= start.elapsed_time(end) < 60.0
    assert end.query()
    end.wait()


def test_mps_profiler_is_a_no_op_and_shaders_are_unsupported():
    torchdevice.enable()
    with torch.mps.profiler.profile():
        torch.mps.profiler.start()
        torch.mps.profiler.stop()
    assert torch.mps.profiler.is_metal_capture_enabled() is False
    assert torch.mps.profiler.is_capturing_metal() is False
    with pytest.raises(UnsupportedFeatureError, match=r"^torch\.mps\.compile_shader"):
        torch.mps.compile_shader("kernel void f() {}")
    with pytest.raises(UnsupportedFeatureError, match="metal_capture"):
        torch.mps.profiler.metal_capture("trace")
    assert torch.backends.mps.get_name() == torch.cuda.get_device_name()


def test_mps_facade_hidden_by_the_option():
    torchdevice.enable(cuda_available=False)
    assert torch.backends.mps.is_available() is False
    assert torch.mps.device_count() == 0


# -- an MPS host, simulated: the facade's calls into torch.mps ------------------------------
class FakeMpsEvent:
    def __init__(self, enable_timing=False):
        self.enable_timing = enable_timing
        self.calls = []

    def record(self):
        self.calls.append("record")

    def synchronize(self):
        self.calls.append("synchronize")

    def query(self):
        return True

    def wait(self):
        self.calls.append("wait")

    def elapsed_time(self, end):
        return 12.5


@pytest.fixture
def fake_mps(monkeypatch):
    calls = []
    generator = torch.Generator()
    for name, value in {
        "current_allocated_memory": lambda: 3 * 2**20,
        "driver_allocated_memory": lambda: 8 * 2**20,
        "recommended_max_memory": lambda: 16 * 2**30,
        "synchronize": lambda: calls.append("synchronize"),
        "empty_cache": lambda: calls.append("empty_cache"),
        "_get_default_mps_generator": lambda: generator,
        "set_per_process_memory_fraction": lambda f: calls.append(("fraction", f)),
        "Event": FakeMpsEvent,
    }.items():
        monkeypatch.setattr(real_device.REAL_MPS, name, value)
    monkeypatch.setattr(real_device.REAL_BACKENDS_MPS, "get_core_count", lambda: 38)
    monkeypatch.setattr(real_device.REAL_BACKENDS_MPS, "is_macos_or_newer", lambda a, b: True)
    return calls, generator


def test_mps_host_facade_answers_from_torch_mps(fake_mps):
    calls, generator = fake_mps
    torchdevice.enable(host=Host.mps("Apple M3 Max"))
    assert torch.cuda.memory_allocated() == 3 * 2**20
    assert torch.cuda.memory_reserved() == 8 * 2**20
    assert torch.cuda.mem_get_info() == (16 * 2**30 - 8 * 2**20, 16 * 2**30)
    props = torch.cuda.get_device_properties(0)
    assert props.name == "Apple M3 Max"
    assert props.total_memory == 16 * 2**30
    assert props.multi_processor_count == 38
    assert props.real_type == "mps"
    assert torch.cuda.is_bf16_supported()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(0.5)
    assert calls == ["synchronize", "empty_cache", ("fraction", 0.5)]
    torch.cuda.manual_seed(9)
    assert generator.initial_seed() == 9
    assert torch.cuda.get_rng_state().equal(generator.get_state())


def test_mps_host_events_are_torch_mps_events(fake_mps):
    torchdevice.enable(host=Host.mps())
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) == 12.5
    assert start._native.calls == ["record"]
    assert end._native.calls == ["record", "synchronize"]


def test_mps_host_peaks_are_sampled(fake_mps, monkeypatch):
    torchdevice.enable(host=Host.mps())
    torch.cuda.reset_peak_memory_stats()
    monkeypatch.setattr(real_device.REAL_MPS, "current_allocated_memory", lambda: 5 * 2**20)
    torch.cuda.synchronize()  # samples
    monkeypatch.setattr(real_device.REAL_MPS, "current_allocated_memory", lambda: 1 * 2**20)
    assert torch.cuda.memory_allocated() == 1 * 2**20
    assert torch.cuda.max_memory_allocated() == 5 * 2**20


# -- a CUDA host, simulated: the torch.mps facade's calls into the real torch.cuda -----------
def test_cuda_host_mps_facade_answers_from_torch_cuda(monkeypatch):
    calls = []
    generator = torch.Generator()
    cuda = real_device.REAL_CUDA
    monkeypatch.setattr(cuda, "synchronize", lambda device=None: calls.append("synchronize"))
    monkeypatch.setattr(cuda, "memory_allocated", lambda device=None: 7)
    monkeypatch.setattr(cuda, "memory_reserved", lambda device=None: 11)
    monkeypatch.setattr(cuda, "empty_cache", lambda: calls.append("empty_cache"))
    monkeypatch.setattr(cuda, "current_device", lambda: 0)
    monkeypatch.setattr(cuda, "default_generators", (generator,))

    class Props:
        total_memory = 80 * 2**30
        multi_processor_count = 132

    monkeypatch.setattr(cuda, "get_device_properties", lambda device=None: Props)
    torchdevice.enable(host=Host.cuda(1, ("NVIDIA H100",)), written_for="mps")
    assert torch.cuda is cuda
    assert run_program(MPS_FIRST)["device"] == "mps"
    torch.mps.synchronize()
    torch.mps.empty_cache()
    assert calls == ["synchronize", "empty_cache"]
    assert torch.mps.current_allocated_memory() == 7
    assert torch.mps.driver_allocated_memory() == 11
    assert torch.mps.recommended_max_memory() == 80 * 2**30
    assert torch.backends.mps.get_core_count() == 132
    assert torch.backends.mps.get_name() == "NVIDIA H100"
    # Seeding goes through torch.cuda.manual_seed/seed, which queue the call until CUDA
    # initializes: reading the generator would initialize CUDA (in a forked DataLoader
    # worker, an error).
    monkeypatch.setattr(cuda, "manual_seed", lambda seed: calls.append(("manual_seed", seed)))
    monkeypatch.setattr(cuda, "seed", lambda: calls.append("seed"))
    torch.mps.manual_seed(3)
    torch.mps.seed()
    assert calls[2:] == [("manual_seed", 3), "seed"]
    assert generator.initial_seed() != 3  # not read


def test_cuda_host_fork_child_seeds_without_touching_cuda(monkeypatch):
    """A worker forked after CUDA initialized seeds itself with torch.manual_seed: torch asks
    torch.mps._is_in_bad_fork() first, which the facade answers from torch.cuda."""
    cuda = real_device.REAL_CUDA
    monkeypatch.setattr(cuda, "_is_in_bad_fork", lambda: True)
    monkeypatch.setattr(cuda, "manual_seed", lambda seed: pytest.fail("CUDA seeded in a bad fork"))
    torchdevice.enable(host=Host.cuda(1, ("NVIDIA H100",)))
    assert torch.mps._is_in_bad_fork() is True
    torch.manual_seed(4)  # seeds the CPU; skips torch.cuda and torch.mps, as natively
    assert torch.initial_seed() == 4
    monkeypatch.setattr(cuda, "_is_in_bad_fork", lambda: False)
    assert torch.mps._is_in_bad_fork() is False


# -- a backend registered at run time (the simulated accelerator's kind) ----------------------
def test_a_registered_backend_answers_through_its_device_module(monkeypatch):
    calls = []
    generator = torch.Generator()

    class Module:
        default_generator = generator

        @staticmethod
        def synchronize():
            calls.append("synchronize")

        @staticmethod
        def memory_allocated():
            return 123

    monkeypatch.setattr(torch, "fakedev", Module, raising=False)
    device = real_device.ModuleDevice("fakedev")
    device.synchronize()
    assert calls == ["synchronize"]
    assert device.generator() is generator
    assert device.allocated_bytes() == 123
    assert device.reserved_bytes() > 0  # no memory_reserved(): the host's heap
    assert device.new_native_event(enable_timing=True) is None  # host clock


# -- which programs find MPS: the machine each is written for ---------------------------------
MPS_FIRST = """\
import torch
available = torch.backends.mps.is_available() and torch.backends.mps.is_built()
device = "mps" if available else "cpu"
"""
CUDA_FIRST_PREFERRING_MPS = """\
import torch
if torch.backends.mps.is_available():
    device = "mps"
elif torch.cuda.is_available():
    device = "cuda"
else:
    device = "cpu"
"""


def run_program(source: str) -> dict[str, object]:
    """Run ``source`` as a program's body (a module of its own), return its globals."""
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(compile(source, "program.py", "exec"), namespace)
    return namespace


@pytest.mark.parametrize("host", [None, Host.cuda(1)], ids=["cpu-host", "cuda-host"])
def test_cuda_code_hears_no_mps_and_mps_code_finds_it(host):
    """A CUDA machine says "no MPS"; an Apple one says yes. The story is the program's
    (this module names CUDA; ``written_for`` says otherwise), the same for every asker."""
    torchdevice.enable(host=host)
    # On the injected CUDA host the CPU build's real torch.cuda says no: the CPU branch.
    assert run_program(CUDA_FIRST_PREFERRING_MPS)["device"] == ("cuda" if host is None else "cpu")
    assert torch.backends.mps.is_available() is False
    assert torch.backends.mps.is_built() is False
    assert torch.mps.is_available() is False
    assert run_program(MPS_FIRST)["device"] == "cpu"  # MPS-only code asking hears the same
    torchdevice.disable()
    torchdevice.enable(host=host, written_for="mps")
    assert run_program(MPS_FIRST)["device"] == "mps"
    assert run_program(CUDA_FIRST_PREFERRING_MPS)["device"] == "mps"


def test_mps_code_asking_first_does_not_make_a_cuda_program_mps_code():
    """The first asker used to decide (transformers asks at import, from code that names
    no accelerator): now the program that enabled decides, whoever asks first."""
    torchdevice.enable()
    assert run_program(MPS_FIRST)["device"] == "cpu"
    assert torch.accelerator.current_accelerator() == torch.device("cuda")


def test_the_module_that_enables_says_what_the_program_is(monkeypatch):
    """``enable()``/``redirect()`` called from MPS code (here a module given to ``exec``:
    no file, its code is read) make an MPS story; Accelerate then picks "mps"."""
    from accelerate.state import PartialState

    # Accelerate sets it when it picks MPS: it must not reach later tests' children.
    monkeypatch.setenv("PYTORCH_ENABLE_MPS_FALLBACK", "0")

    enabling = MPS_FIRST.replace("import torch", "import torch, torchdevice\ntorchdevice.enable()")
    assert run_program(enabling)["device"] == "mps"
    assert PartialState.default_device.fget(None) == torch.device("mps")
    assert torch.accelerator.current_accelerator() == torch.device("mps")
    torchdevice.disable()
    in_block = (
        "import torch, torchdevice\n"
        "with torchdevice.redirect():\n"
        "    device = 'mps' if torch.backends.mps.is_available() else 'cpu'\n"
    )
    assert run_program(in_block)["device"] == "mps"
    assert run_program(in_block.replace("'cpu'", "'cuda'"))["device"] == "cuda"
