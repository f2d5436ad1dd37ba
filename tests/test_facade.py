"""The torch.cuda facade on this CPU-only host: installed, answering, and removed exactly.

Every answer is checked against the value the real device gives (psutil, the CPU
generator, the host name), not only for "does not raise".
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys

import psutil
import pytest
import torch

import torchdevice
from torchdevice import Host, UnsupportedFeatureError, facade
from torchdevice.facade import mps
from torchdevice.facade.properties import DeviceProperties
from torchdevice.host import cpu_name
from torchdevice.patches import amp

REAL_CUDA = sys.modules["torch.cuda"]
REAL_MPS = sys.modules["torch.mps"]
REAL_BACKENDS_MPS = sys.modules["torch.backends.mps"]
CUDA_SUBMODULES = {
    name: module for name, module in sys.modules.items() if name.startswith("torch.cuda.")
}
CPU = torch.device("cpu")


def facade_state() -> dict[str, object]:
    """Every object the facades replace, by identity."""
    state: dict[str, object] = {
        key: sys.modules.get(key)
        for key in list(sys.modules)
        if key.startswith(("torch.cuda", "torch.mps", "torch.backends.mps"))
    }
    state["torch.cuda attr"] = torch.cuda
    state["torch.mps attr"] = torch.mps
    state["torch.backends.mps attr"] = torch.backends.mps
    state["autocast.__init__"] = torch.amp.autocast_mode.autocast.__dict__["__init__"]
    state["GradScaler.__init__"] = torch.amp.grad_scaler.GradScaler.__dict__["__init__"]
    return state


def test_enable_installs_and_disable_restores_every_object_exactly():
    before = facade_state()
    torchdevice.enable()
    assert facade.installed()
    assert mps.installed()
    assert amp.installed()
    assert sys.modules["torch.cuda"] is torch.cuda is not REAL_CUDA
    assert sys.modules["torch.mps"] is torch.mps is not REAL_MPS
    assert torch.backends.mps is not REAL_BACKENDS_MPS
    for name in ("random", "memory", "streams", "nvtx", "graphs", "tunable", "nccl", "jiterator"):
        assert sys.modules[f"torch.cuda.{name}"] is getattr(torch.cuda, name)
        assert sys.modules[f"torch.cuda.{name}"] is not CUDA_SUBMODULES.get(f"torch.cuda.{name}")
    torchdevice.disable()
    after = facade_state()
    assert after.keys() == before.keys()
    changed = [key for key in before if before[key] is not after[key]]
    assert changed == []
    assert not (facade.installed())
    assert not (mps.installed())
    assert not (amp.installed())


def test_enable_twice_and_nested_redirects_keep_one_facade():
    torchdevice.enable()
    first = torch.cuda
    torchdevice.enable()
    assert torch.cuda is first
    with torchdevice.redirect(keep_cpu=True):
        assert torch.cuda is first
    assert torch.cuda is first
    torchdevice.disable()
    assert torch.cuda is REAL_CUDA


def test_get_device_module_cache_is_cleared_both_ways():
    original = torch.get_device_module
    assert torch.get_device_module("cuda") is REAL_CUDA  # caches the real module
    torchdevice.enable()
    assert torch.get_device_module("cuda") is torch.cuda is not REAL_CUDA
    assert torch.get_device_module("mps") is torch.mps is not REAL_MPS
    assert torch.get_device_module(torch.device("cuda")) is torch.cuda  # read as written
    torchdevice.disable()
    assert torch.get_device_module is original
    assert torch.get_device_module("cuda") is REAL_CUDA
    assert torch.get_device_module("mps") is REAL_MPS


def test_submodules_import_through_the_facade():
    torchdevice.enable()
    random = importlib.import_module("torch.cuda.random")
    import torch.cuda.amp
    from torch.cuda import nvtx
    from torch.cuda.memory import memory_allocated

    assert random is torch.cuda.random
    assert nvtx is torch.cuda.nvtx
    assert memory_allocated is torch.cuda.memory_allocated
    assert torch.cuda.amp is CUDA_SUBMODULES["torch.cuda.amp"]  # the real package
    random.manual_seed(11)
    assert torch.default_generator.initial_seed() == 11


def test_a_cuda_submodule_first_imported_while_enabled_is_adopted_by_the_real_module():
    name = "torch.cuda.gds"  # a submodule the facade does not stand in for
    saved = sys.modules.pop(name, None)
    saved_attr = REAL_CUDA.__dict__.pop("gds", None)
    try:
        torchdevice.enable()
        module = importlib.import_module(name)
        torchdevice.disable()
        assert sys.modules[name] is module
        assert REAL_CUDA.gds is module
    finally:
        if saved is not None:
            sys.modules[name] = saved
            REAL_CUDA.gds = saved_attr


def test_availability_and_device_selection():
    torchdevice.enable()
    assert torch.cuda.is_available() is True
    assert torch.cuda.is_initialized() is True
    assert torch.cuda.device_count() == 1
    assert torch.cuda.current_device() == 0
    torch.cuda.set_device(0)
    torch.cuda.set_device("cuda:1")  # every cuda:n lands on the single target
    assert torch.cuda.current_device() == 0
    with torch.cuda.device(1):
        assert torch.cuda.current_device() == 0
        assert torch.zeros(1, device=torch.cuda.current_device()).device == CPU
    with torch.cuda.device_of(torch.zeros(1)):
        assert torch.cuda.current_device() == 0
    with pytest.raises(RuntimeError, match="Invalid device string"):
        torch.cuda.set_device("cuda:x")
    torch.cuda.init()


def test_availability_is_an_option():
    torchdevice.enable(cuda_available=False)
    assert torch.cuda.is_available() is False
    assert torch.cuda.device_count() == 0
    assert torch.backends.mps.is_available() is False
    assert torch.zeros(1, device="cuda").device == CPU  # still redirected


def test_l2_cache_size_is_the_cpus():
    """Checked against glibc's own answer (getconf), not the code under test."""
    getconf = shutil.which("getconf")
    answer = (
        subprocess.run([getconf, "LEVEL2_CACHE_SIZE"], capture_output=True, text=True, check=False)
        if getconf
        else None
    )
    if answer is None or answer.returncode != 0 or not answer.stdout.strip().isdigit():
        pytest.skip("getconf does not know this CPU's L2 cache size")
    torchdevice.enable()
    assert torch.cuda.get_device_properties(0).L2_cache_size == int(answer.stdout)


def test_device_name_and_properties_are_the_real_cpus():
    torchdevice.enable()
    assert torch.cuda.get_device_name() == torch.cuda.get_device_name(0) == cpu_name()
    props = torch.cuda.get_device_properties(0)
    assert isinstance(props, DeviceProperties)
    assert props.name == cpu_name()
    assert props.total_memory == psutil.virtual_memory().total
    assert props.multi_processor_count == psutil.cpu_count(logical=True)
    assert (props.major, props.minor) == (0, 0) == torch.cuda.get_device_capability()
    assert props.is_integrated == 1
    assert props.warp_size == 1
    assert props.gcnArchName == ""
    assert "total_memory=" in repr(props)
    assert torch.cuda.is_bf16_supported() is True
    assert torch.cuda.is_tf32_supported() is False
    assert torch.cuda.is_bf16_supported(including_emulation=False) == bool(
        torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    )


def test_batch_sizing_from_total_memory_is_sane():
    torchdevice.enable()
    total = torch.cuda.get_device_properties(0).total_memory
    free, total_again = torch.cuda.mem_get_info()
    assert total == total_again
    assert 0 < free <= total
    batch = max(1, int(0.01 * free) // (3 * 224 * 224 * 4))
    x = torch.empty(min(batch, 4), 3, 8, 8, device="cuda")
    assert x.device == CPU


def test_rng_uses_the_real_generator_without_recursion():
    torchdevice.enable()
    torch.manual_seed(123)  # calls torch.cuda.manual_seed_all and torch.mps.manual_seed
    assert torch.cuda.initial_seed() == 123
    state = torch.cuda.get_rng_state()
    assert torch.equal(state, torch.default_generator.get_state())
    first = torch.rand(3, device="cuda")
    torch.cuda.set_rng_state(state)
    assert torch.equal(torch.rand(3, device="cuda"), first)
    torch.cuda.manual_seed(5)
    a = torch.randn(2, device="cuda")
    torch.cuda.manual_seed_all(5)
    assert torch.equal(torch.randn(2, device="cuda"), a)
    states = torch.cuda.get_rng_state_all()
    assert len(states) == 1
    torch.cuda.set_rng_state_all(states)
    assert torch.cuda.default_generators == (torch.default_generator,)
    torch.cuda.seed()
    torch.cuda.seed_all()
    assert torch.cuda.initial_seed() == torch.default_generator.initial_seed()


def test_fork_rng_reads_and_restores_the_cuda_state():
    torchdevice.enable()
    torch.manual_seed(0)
    with torch.random.fork_rng(device_type="cuda"):
        inside = torch.rand(2, device="cuda")
    after = torch.rand(2, device="cuda")
    assert torch.equal(inside, after)  # the fork restored the state it read


def test_legacy_typed_tensors():
    torchdevice.enable()
    f = torch.cuda.FloatTensor(3, 3)
    assert f.shape == (3, 3)
    assert f.dtype == torch.float32
    assert f.device == CPU
    longs = torch.cuda.LongTensor([1, 2])
    assert longs.tolist() == [1, 2]
    assert longs.dtype == torch.int64
    assert isinstance(f, torch.cuda.FloatTensor)
    assert not isinstance(f, torch.cuda.LongTensor)
    assert isinstance(longs, torch.cuda.LongTensor)
    assert not isinstance(torch.zeros(1, device="meta"), torch.cuda.FloatTensor)
    converted = torch.tensor([1, 2]).type(torch.cuda.FloatTensor)
    assert converted.dtype == torch.float32
    assert converted.tolist() == [1.0, 2.0]
    assert torch.tensor([1.5]).type("torch.cuda.HalfTensor").dtype == torch.float16
    assert torch.cuda.BoolTensor([True]).dtype == torch.bool
    report = torchdevice.report()
    assert any(entry.api == "torch.cuda.FloatTensor" for entry in report.entries)


@pytest.fixture
def default_type_restored():
    """Put torch's default dtype and device back after a test that changes them."""
    yield
    torch.set_default_dtype(torch.float32)
    torch.set_default_device(None)


@pytest.mark.usefixtures("default_type_restored")
def test_legacy_default_tensor_type_sets_the_dtype_and_the_redirected_device():
    """``torch.set_default_tensor_type(torch.cuda.HalfTensor)``, as on a GPU: the default
    dtype is float16, device-less factories and ``torch.Tensor(...)`` make float16 tensors
    where ``"cuda"`` goes (the CPU here), ``torch.FloatTensor`` stays the CPU float32 class;
    the call is a report row whose advice is its port. The dotted name works too; a
    non-floating class raises torch's TypeError; a CPU class ends the device default."""
    torchdevice.enable()
    torch.set_default_tensor_type(torch.cuda.HalfTensor)
    assert torch.get_default_dtype() == torch.float16
    legacy, made = torch.Tensor(2, 3), torch.zeros(2)
    assert (legacy.dtype, legacy.device, made.dtype, made.device) == (
        torch.float16,
        CPU,
        torch.float16,
        CPU,
    )
    assert legacy.cuda() is legacy  # stands for a device tensor, as on a GPU
    assert torch.FloatTensor(2).dtype == torch.float32
    assert "__new__" in vars(torch.Tensor)
    (row,) = [e for e in torchdevice.report().entries if e.api == "torch.set_default_tensor_type"]
    assert (row.requested, row.decided, row.kind) == ("cuda", "cpu:0", "redirect")
    torch.set_default_tensor_type("torch.cuda.FloatTensor")
    assert torch.get_default_dtype() == torch.float32
    assert torch.Tensor([1.5]).tolist() == [1.5]
    with pytest.raises(TypeError, match="only floating-point types are supported"):
        torch.set_default_tensor_type(torch.cuda.LongTensor)
    torch.set_default_tensor_type(torch.DoubleTensor)
    assert torch.get_default_dtype() == torch.float64
    assert "__new__" not in vars(torch.Tensor)  # back to torch's own constructor
    assert torch.Tensor(1).dtype == torch.float64


@pytest.mark.usefixtures("default_type_restored")
def test_disable_takes_the_legacy_constructor_back():
    """A device default set by the legacy API leaves with the activation: torch's own
    ``torch.Tensor`` constructor and ``set_default_tensor_type`` are back after disable."""
    original = torch.set_default_tensor_type
    torchdevice.enable()
    torch.set_default_tensor_type(torch.cuda.FloatTensor)
    torchdevice.disable()
    assert "__new__" not in vars(torch.Tensor)
    assert torch.set_default_tensor_type is original
    assert torch.Tensor(2).device == CPU


def test_nvtx_ranges_are_no_ops_with_nvtx_return_values():
    torchdevice.enable()
    nvtx = torch.cuda.nvtx
    assert nvtx.range_push("outer") == 0
    assert nvtx.range_push("inner") == 1
    assert nvtx.range_pop() == 1
    assert nvtx.range_pop() == 0
    assert nvtx.range_pop() == -1
    with nvtx.range("step {}", 3):
        assert nvtx.range_push("x") == 1
        nvtx.range_pop()
    first, second = nvtx.range_start("a"), nvtx.range_start("b")
    assert second == first + 1
    nvtx.range_end(first)
    nvtx.mark("here")
    with torch.cuda.profiler.profile():
        torch.cuda.profiler.start()
        torch.cuda.profiler.stop()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the real TunableOp answers on CUDA")
def test_tunable_op_switches_keep_their_values_and_change_no_result(caplog):
    """``torch.cuda.tunable.enable(True)`` raised AttributeError on torch._C (issue 36): a
    switch that changes how fast a GEMM runs, never its result, is a logged no-op."""
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    expected = a @ b
    torchdevice.enable()
    tunable = torch.cuda.tunable
    assert (tunable.is_enabled(), tunable.tuning_is_enabled()) == (False, True)
    with caplog.at_level("INFO", logger="torchdevice"):
        tunable.enable(True)
        tunable.set_max_tuning_iterations(10)
        tunable.set_filename("tuned.csv")
    assert tunable.is_enabled() is True
    assert (tunable.get_max_tuning_iterations(), tunable.get_filename()) == (10, "tuned.csv")
    assert tunable.get_results() == ()
    assert tunable.read_file() is False
    said = [r.getMessage() for r in caplog.records if "torch.cuda.tunable:" in r.getMessage()]
    assert len(said) == 1
    assert "change nothing" in said[0]
    assert torch.equal(a.to("cuda") @ b.to("cuda"), expected)
    assert any(e.api == "torch.cuda.tunable.enable" for e in torchdevice.report().entries)
    tunable.enable(False)


def test_cudnn_and_cuda_backend_flags_are_settable_without_effect():
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    saved = (cudnn.benchmark, cudnn.deterministic, matmul.allow_tf32, cudnn.allow_tf32)
    torchdevice.enable()
    try:
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.deterministic = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = False
        assert torch.backends.cudnn.benchmark is True
        assert torch.backends.cuda.matmul.allow_tf32 is True
        x = torch.randn(4, 4, device="cuda")
        torch.testing.assert_close(x @ x, x.cpu() @ x.cpu())
    finally:
        (cudnn.benchmark, cudnn.deterministic, matmul.allow_tf32, cudnn.allow_tf32) = saved


def later(path: str, *args, **kwargs):
    """Call ``torch.cuda.<path>`` when the test runs (the facade is not in place before)."""

    def call():
        target = torch.cuda
        for part in path.split("."):
            target = getattr(target, part)
        return target(*args, **kwargs)

    return call


@pytest.mark.parametrize(
    ("call", "feature"),
    [
        (later("CUDAGraph"), "torch.cuda.CUDAGraph"),
        (later("graph", None), "torch.cuda.graph"),
        (later("make_graphed_callables", abs, ()), "torch.cuda.make_graphed_callables"),
        (later("graph_pool_handle"), "torch.cuda.graph_pool_handle"),
        (later("graphs.CUDAGraph"), "torch.cuda.CUDAGraph"),
        (later("cudart"), "torch.cuda.cudart"),
        (later("jiterator._create_jit_fn", "code"), "torch.cuda.jiterator._create_jit_fn"),
        (later("nccl.all_reduce", []), "torch.cuda.nccl.all_reduce"),
        (later("nccl.version"), "torch.cuda.nccl.version"),
        (later("comm.broadcast", None, [0]), "torch.cuda.comm.broadcast"),
        (later("caching_allocator_alloc", 16), "torch.cuda.caching_allocator_alloc"),
        (later("MemPool"), "torch.cuda.MemPool"),
        (later("memory._record_memory_history"), "torch.cuda.memory._record_memory_history"),
        (later("Event", interprocess=True), "torch.cuda.Event(interprocess=True)"),
        (lambda: torch.cuda.Event().ipc_handle(), "torch.cuda.Event.ipc_handle"),
        (later("ExternalStream", 0), "torch.cuda.ExternalStream"),
        (lambda: torch.cuda.current_stream().cuda_stream, "torch.cuda.Stream.cuda_stream"),
        (later("utilization"), "torch.cuda.utilization"),
    ],
)
def test_cuda_only_features_raise_a_clear_error(call, feature):
    torchdevice.enable()
    with pytest.raises(UnsupportedFeatureError) as info:
        call()
    assert isinstance(info.value, RuntimeError)
    message = str(info.value)
    assert message.startswith(feature)
    assert "CUDA-only" in message
    assert info.value.feature.startswith(feature)
    assert len(message) > len(feature) + 80  # it says what to do instead


def test_queries_whose_true_answer_is_no_answer_it():
    torchdevice.enable()
    assert torch.cuda.is_current_stream_capturing() is False
    assert torch.cuda.graphs.is_current_stream_capturing() is False
    assert torch.cuda.nccl.is_available([torch.ones(1)]) is False
    torch.cuda.ipc_collect()  # no IPC handle can exist: nothing to collect


def test_facade_objects_kept_past_disable_say_so():
    torchdevice.enable()
    kept = torch.cuda
    torchdevice.disable()
    with pytest.raises(RuntimeError, match=r"after torchdevice\.disable"):
        kept.get_device_name()


def test_unknown_names_fall_through_to_the_real_module():
    torchdevice.enable()
    assert torch.cuda.OutOfMemoryError is REAL_CUDA.OutOfMemoryError
    assert torch.cuda.get_arch_list() == REAL_CUDA.get_arch_list()
    assert torch.cuda.__file__ == REAL_CUDA.__file__


def test_inductor_sees_the_real_gpu_types():
    """Inductor asserts at most one GPU type is available; it must see the truth."""
    from torch._inductor import utils

    truth = [t for t in utils.GPU_TYPES if getattr(torch, t).is_available()]
    torchdevice.enable()
    utils.get_gpu_type.cache_clear()
    try:
        assert torch.cuda.is_available()
        assert not torch.mps.is_available()  # CUDA code hears what a CUDA machine says
        assert utils.get_gpu_type() == (truth or ["cuda"])[0]  # no AssertionError
        namespace = {
            "__name__": "torch._inductor.somewhere",
            "torch": torch,
            "GPU": utils.GPU_TYPES,
        }
        exec("available = [t for t in GPU if getattr(torch, t).is_available()]", namespace)
        assert namespace["available"] == truth  # inductor's own view: the real GPUs
    finally:
        utils.get_gpu_type.cache_clear()


def test_cuda_host_keeps_the_real_torch_cuda_and_gets_the_mps_facade():
    torchdevice.enable(host=Host.cuda(2))
    assert torch.cuda is REAL_CUDA
    assert not facade.installed()
    assert mps.installed()
    # This test names CUDA: a CUDA machine has no MPS. MPS code finds it (test_facade_mps).
    assert torch.backends.mps.is_available() is False
    assert torch.backends.mps.is_built() is False


def test_mps_host_gets_the_cuda_facade_and_keeps_the_real_torch_mps():
    torchdevice.enable(host=Host.mps("Apple M2"))
    assert facade.installed()
    assert not mps.installed()
    assert torch.mps is REAL_MPS
    assert torch.backends.mps is REAL_BACKENDS_MPS
    assert torch.cuda.get_device_name(0) == "Apple M2"


def test_switching_hosts_inside_redirect_swaps_facades():
    torchdevice.enable()
    with torchdevice.redirect(host=Host.cuda(1)):
        assert torch.cuda is REAL_CUDA
        assert mps.installed()
    assert facade.installed()
    assert mps.installed()
    with torchdevice.redirect(host=Host.mps()):
        assert facade.installed()
        assert torch.mps is REAL_MPS
    assert mps.installed()


def test_device_module_calls_are_rows_of_the_report_at_the_users_line():
    torchdevice.enable()
    first = sys._getframe().f_lineno + 1
    assert torch.cuda.is_available()
    torch.cuda.synchronize()
    event = torch.cuda.Event(enable_timing=True)
    stream = torch.cuda.default_stream()  # the facade makes a Stream: not the user's line
    from torch.cuda.memory import memory_allocated

    assert memory_allocated is torch.cuda.memory_allocated  # one object, as natively
    memory_allocated()
    with torch.random.fork_rng(device_type="cuda"):  # torch's own torch.cuda calls
        pass
    assert isinstance(event, torch.cuda.Event)
    assert isinstance(stream, torch.cuda.Stream)
    rows = sorted(
        (e.site.lineno - first, e.api, e.count)
        for e in torchdevice.report().entries
        if e.kind == "device-api"
    )
    assert rows == [
        (0, "torch.cuda.is_available", 1),
        (1, "torch.cuda.synchronize", 1),
        (2, "torch.cuda.Event", 1),
        (3, "torch.cuda.default_stream", 1),
        (7, "torch.cuda.memory_allocated", 1),
    ]


@pytest.mark.parametrize("cuda_available", [True, False])
def test_rng_state_all_round_trips_like_torchs(cuda_available):
    """torch's forms: one state per counted device, and ``[]`` restores nothing.

    Lightning's ``isolate_rng`` reads ``get_rng_state_all()`` (or ``[]`` with CUDA hidden)
    and hands it back to ``set_rng_state_all``: an empty list must not raise.
    """
    torchdevice.enable(cuda_available=cuda_available)
    states = torch.cuda.get_rng_state_all()
    assert len(states) == torch.cuda.device_count() == (1 if cuda_available else 0)
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.cuda.set_rng_state_all([])  # nothing to restore: the generator is left alone
    assert not torch.equal(torch.rand(3), expected)
    torch.manual_seed(7)
    saved = [torch.default_generator.get_state()]
    torch.rand(3)
    torch.cuda.set_rng_state_all(saved)
    assert torch.equal(torch.rand(3), expected)


def test_torch_accelerator_tells_the_facades_story():
    """On the CPU host torch.accelerator says CUDA, as torch.cuda does; then it is gone."""
    real = torch.accelerator
    assert real.current_accelerator() is None  # this CPU build: no accelerator
    torchdevice.enable()
    assert torch.accelerator.is_available() is True
    assert torch.accelerator.current_accelerator() == torch.device("cuda")
    assert torch.accelerator.device_count() == torch.cuda.device_count() == 1
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.set_device_index(0)
    with torch.accelerator.device_index(0):
        torch.accelerator.synchronize()
    assert torch.accelerator.memory_allocated() == torch.cuda.memory_allocated()
    x = torch.ones(2, device=torch.accelerator.current_accelerator())
    assert x.device == CPU
    torchdevice.disable()
    assert torch.accelerator is real
    assert torch.accelerator.current_accelerator() is None


def test_torch_event_follows_the_accelerator_story():
    """Code ported by ``torchdevice port`` makes ``torch.Event(enable_timing=True)`` where
    ``torch.accelerator.is_available()``: true under the redirect, so the event must work
    there (natively this CPU build answers "cpu backend doesn't support events" at
    ``record``). It is the facade's event on the real device, times real work, is counted
    as nothing to port, and torch's own type comes back on disable."""
    real = torch.Event
    with pytest.raises(RuntimeError, match="cpu backend doesn't support events"):
        real(enable_timing=True).record()
    torchdevice.enable()
    try:
        assert torch.accelerator.is_available()
        start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
        start.record()
        torch.randn(256, 256) @ torch.randn(256, 256)
        end.record()
        end.synchronize()
        assert isinstance(start, torch.Event)
        assert start.elapsed_time(end) > 0.0
        assert start.query()
        assert type(torch.Event("cpu")) is real  # an explicit CPU event is torch's own
        assert [row.api for row in torchdevice.report().entries if "Event" in row.api] == []
    finally:
        torchdevice.disable()
    assert torch.Event is real


def test_torch_accelerator_hidden_with_the_facades():
    torchdevice.enable(cuda_available=False)
    assert torch.accelerator.is_available() is False
    assert torch.accelerator.current_accelerator() is None


@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_pin_memory_without_warning_or_pin_thread(workers):
    """torch's DataLoader asks torch.accelerator: it finds the accelerator the facade
    announces (no "no accelerator is found" warning), and hands back the batches
    unchanged; where nothing can be pinned it starts no pin-memory thread, as torch does
    on MPS (patches/data_loader.py), and torch's own iterator comes back on disable()."""
    import threading
    import warnings

    torchdevice.enable()
    data = torch.utils.data.TensorDataset(torch.arange(8.0).reshape(4, 2))
    loader = torch.utils.data.DataLoader(data, batch_size=2, pin_memory=True, num_workers=workers)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "no accelerator is found" would raise here
        iterator = iter(loader)
        assert (iterator._pin_memory, iterator._pin_memory_device) == (False, "cuda")
        assert loader.pin_memory is True  # what the user's code reads is as written
        assert not hasattr(iterator, "_pin_memory_thread")
        batches = []
        for (batch,) in iterator:
            batches.append(batch)
            names = [thread.name for thread in threading.enumerate()]
            assert not [name for name in names if "_pin_memory_loop" in name], names
    torch.testing.assert_close(torch.cat(batches), torch.arange(8.0).reshape(4, 2))
    torchdevice.disable()
    assert torch.utils.data.dataloader._BaseDataLoaderIter.__init__.__module__ == (
        "torch.utils.data.dataloader"
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_without_pinning_has_its_file_read_before_the_workers_fork(workers):
    """Natively torch's "no accelerator is found" warning reads dataloader.py into
    linecache, and each forked worker finds it there when its seeding formats the stack;
    where torchdevice turns pinning off instead, the file is read once in the parent, and
    only for a loader that forks workers."""
    import linecache

    from torch.utils.data import dataloader

    linecache.cache.pop(dataloader.__file__, None)
    torchdevice.enable()
    try:
        data = torch.utils.data.TensorDataset(torch.arange(8.0))
        loader = torch.utils.data.DataLoader(data, pin_memory=True, num_workers=workers)
        iterator = iter(loader)
        assert (dataloader.__file__ in linecache.cache) is bool(workers)
        assert [int(x) for (x,) in iterator] == list(range(8))
    finally:
        torchdevice.disable()


def test_compiled_code_adds_no_graph_break_for_torch_accelerator():
    """Dynamo asks torch.accelerator while tracing (stream tracking): it gets torch's own
    answer there, so a CUDA factory in compiled code still compiles in one graph."""
    from torch._dynamo.utils import counters

    torchdevice.enable()
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(lambda x: x * 2 + torch.ones(2, device="cuda"))
    torch.testing.assert_close(compiled(torch.ones(2, device="cuda")), torch.full((2,), 3.0))
    assert dict(counters["graph_break"]) == {}
    torch._dynamo.reset()
