"""Memory statistics, streams, events and synchronize of the torch.cuda facade on a CPU host.

The numbers are the C heap's (glibc ``mallinfo2``): a 64 MiB tensor shows as 64 MiB more
allocated and the bytes go away when it is freed; peaks track allocations freed before
anyone asked, through the kernel's resident high-water mark.
"""

from __future__ import annotations

import gc
import sys
import threading
import time

import psutil
import pytest
import torch

import torchdevice
from torchdevice.facade.real_device import _mallinfo2

MIB = 2**20
SIZE = 64 * MIB
needs_mallinfo = pytest.mark.skipif(_mallinfo2() is None, reason="needs glibc mallinfo2")
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")


@needs_mallinfo
def test_allocated_grows_with_a_64_mib_tensor_and_falls_when_it_is_freed():
    torchdevice.enable()
    before = torch.cuda.memory_allocated()
    x = torch.empty(SIZE // 4, device="cuda")  # never written: still allocated
    during = torch.cuda.memory_allocated()
    assert SIZE <= during - before < SIZE + MIB
    assert torch.cuda.memory_reserved() >= during
    del x
    gc.collect()
    after = torch.cuda.memory_allocated()
    assert abs(after - before) < MIB


@needs_mallinfo
def test_peak_tracks_a_sampled_allocation_and_reset_forgets_it():
    torchdevice.enable()
    x = torch.ones(SIZE // 4, device="cuda")
    torch.cuda.memory_allocated()  # sampled while alive
    with_x = torch.cuda.max_memory_allocated()
    del x
    assert torch.cuda.max_memory_allocated() == with_x  # the peak stays
    assert torch.cuda.max_memory_allocated() - torch.cuda.memory_allocated() >= SIZE - MIB
    torch.cuda.reset_peak_memory_stats()
    assert torch.cuda.max_memory_allocated() - torch.cuda.memory_allocated() < SIZE // 2


@needs_mallinfo
@linux_only
def test_peak_sees_an_allocation_freed_before_anyone_asked():
    torchdevice.enable()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()

    def step() -> float:  # activations: created, written, freed inside
        activations = torch.ones(SIZE // 4, device="cuda")
        return float(activations[0])

    assert step() == 1.0
    peak = torch.cuda.max_memory_allocated()
    assert peak - start >= SIZE - MIB
    assert torch.cuda.max_memory_reserved() >= peak


@needs_mallinfo
def test_memory_stats_and_aliases_agree():
    torchdevice.enable()
    x = torch.ones(SIZE // 4, device="cuda")
    stats = torch.cuda.memory_stats()
    assert set(stats) >= {
        "allocated_bytes.all.current",
        "allocated_bytes.all.peak",
        "reserved_bytes.all.current",
        "reserved_bytes.all.peak",
    }
    assert stats["allocated_bytes.all.peak"] >= stats["allocated_bytes.all.current"] >= SIZE
    nested = torch.cuda.memory_stats_as_nested_dict()
    assert nested["allocated_bytes"]["all"]["current"] >= SIZE
    assert abs(torch.cuda.memory_cached() - torch.cuda.memory_reserved()) < MIB
    assert torch.cuda.max_memory_cached() >= torch.cuda.memory_reserved() - MIB
    summary = torch.cuda.memory_summary()
    assert "Allocated memory" in summary
    assert "cpu" in summary
    assert "MiB" in summary
    assert "Source" not in torch.cuda.memory_summary(abbreviated=True)
    from torch.cuda.memory import memory_allocated

    assert memory_allocated() >= SIZE
    del x
    torch.cuda.reset_max_memory_allocated()
    torch.cuda.reset_accumulated_memory_stats()


def test_mem_get_info_is_psutils_view():
    torchdevice.enable()
    free, total = torch.cuda.mem_get_info(0)
    vm = psutil.virtual_memory()
    assert total == vm.total
    assert abs(free - vm.available) < 0.05 * vm.total


def test_empty_cache_and_memory_fraction():
    torchdevice.enable()
    torch.cuda.empty_cache()
    assert torch.cuda.get_per_process_memory_fraction() == 1.0
    torch.cuda.set_per_process_memory_fraction(0.5)
    assert torch.cuda.get_per_process_memory_fraction() == 0.5
    torch.cuda.set_per_process_memory_fraction(1.0)
    with pytest.raises(ValueError, match="Invalid fraction"):
        torch.cuda.set_per_process_memory_fraction(1.5)
    with pytest.raises(RuntimeError, match="Invalid device string"):
        torch.cuda.memory_allocated("cuda:zero")


def test_event_timing_reads_a_60_ms_region_as_60_ms():
    torchdevice.enable()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    assert isinstance(start, torch.cuda.Event)
    start.record()
    time.sleep(0.060)
    end.record()
    end.synchronize()
    elapsed = start.elapsed_time(end)
    assert 59.0 <= elapsed < 90.0
    assert start.query()
    assert end.query()
    end.wait()
    end.wait(torch.cuda.current_stream())


def test_event_errors_match_cudas():
    torchdevice.enable()
    untimed, timed = torch.cuda.Event(), torch.cuda.Event(enable_timing=True)
    untimed.record()
    timed.record()
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        untimed.elapsed_time(timed)
    with pytest.raises(RuntimeError, match="recorded"):
        torch.cuda.Event(enable_timing=True).elapsed_time(timed)
    assert torch.cuda.Event().query()  # an unrecorded event has nothing pending


def test_streams_select_wait_and_synchronize():
    torchdevice.enable()
    default = torch.cuda.default_stream()
    assert torch.cuda.current_stream() is default
    assert isinstance(default, torch.cuda.Stream)
    assert isinstance(default, torch.Stream)
    side = torch.cuda.Stream()
    assert side.device == torch.device("cpu")
    with torch.cuda.stream(side):
        assert torch.cuda.current_stream() is side
        with torch.cuda.stream(None):  # None selects nothing, as in CUDA
            assert torch.cuda.current_stream() is side
        y = torch.ones(3, device="cuda") * 2
    assert torch.cuda.current_stream() is default
    side.wait_stream(default)
    default.wait_stream(side)
    event = side.record_event()
    assert isinstance(event, torch.cuda.Event)
    assert event.query()
    default.wait_event(event)
    assert side.query()
    side.synchronize()
    torch.cuda.synchronize()
    torch.cuda.synchronize(0)
    assert y.tolist() == [2.0, 2.0, 2.0]
    assert torch.cuda.Stream.priority_range() == (0, 0)
    torch.cuda.set_stream(side)
    assert torch.cuda.current_stream() is side
    torch.cuda.set_stream(default)


def test_stream_selection_is_per_thread():
    torchdevice.enable()
    side = torch.cuda.Stream()
    seen = []
    with torch.cuda.stream(side):
        thread = threading.Thread(target=lambda: seen.append(torch.cuda.current_stream()))
        thread.start()
        thread.join()
    assert seen == [torch.cuda.default_stream()]
    assert seen[0] is not side


def test_stream_context_restores_on_exception():
    torchdevice.enable()
    side = torch.cuda.Stream()
    with pytest.raises(KeyError), torch.cuda.stream(side):
        raise KeyError
    assert torch.cuda.current_stream() is torch.cuda.default_stream()


@needs_mallinfo
def test_memory_query_cost_is_small_and_nothing_is_counted_per_op():
    """The tracker reads the allocator on demand: ops run at native speed."""
    torchdevice.enable()
    calls = 2000
    started = time.perf_counter()
    for _ in range(calls):
        torch.cuda.memory_allocated()
    per_call = (time.perf_counter() - started) / calls
    assert per_call < 200e-6  # a few microseconds here; generous for slow CI
