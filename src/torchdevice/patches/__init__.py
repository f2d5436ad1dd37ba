"""Everything torchdevice changes in torch and the standard library, and the one order in
which activation puts it in place.

One module per family of changes:

* :mod:`~torchdevice.patches.threads`: the function mode carried into other threads
  (``threading.setprofile``), and out again before they end;
* :mod:`~torchdevice.patches.backward`: the function mode back on the stack while autograd
  runs the program's hooks and custom backward functions;
* :mod:`~torchdevice.patches.calls`: device-taking calls that never reach a function mode
  (``torch.load``, ``torch.Generator``, ``torch.range``, ``torch.nested``,
  ``torch.set_default_device``, ``Module.cuda/cpu``, ``torch._utils._rebuild_tensor``);
* :mod:`~torchdevice.patches.warning_hooks`: warnings at the user's line, and torch's own
  MPS fallbacks counted from their warning;
* :mod:`~torchdevice.patches.amp`: autocast and GradScaler on the real device type;
* :mod:`~torchdevice.patches.sharing`: accelerator tensors across processes without IPC;
* :mod:`~torchdevice.patches.net`: allocation kernels on the dispatch keys this build of
  torch lacks (what the mode cannot see);
* :mod:`~torchdevice.patches.distributed`: ``torch.distributed`` written for NCCL on the
  backend the host has (with :mod:`torchdevice.patches.nccl_forms`);
* :mod:`~torchdevice.patches.data_parallel`: ``nn.DataParallel`` as on a one-GPU machine;
* :mod:`~torchdevice.patches.data_loader`: no pin-memory thread where nothing can be pinned;
* :mod:`~torchdevice.patches.compiled_graphs`: graphs compiled under the function mode run
  without it where nothing in them needs it.

The ``torch.cuda``/``torch.mps``/``torch.accelerator`` facades (:mod:`torchdevice.facade`),
the report's exit handler (:mod:`torchdevice.reporting.parts`), the logger's level
(:mod:`torchdevice.logs`) and the variables exported for child processes are changes too;
their code lives with what they serve, and they are patches of :data:`INSTALL_ORDER`.

:data:`INSTALL_ORDER` is the list :mod:`torchdevice.activation` walks: every patch on the
first activation, the patches that follow the host at each reconfiguration. Every change is
recorded in the :mod:`~torchdevice.ledger`, which undoes them all on ``disable()``; each
patch also lists the spots it changes (:attr:`Patch.spots`), which the test suite's
pristine check reads back after every test.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from torchdevice import ledger, logs
from torchdevice.patches import calls, net, threads, warning_hooks
from torchdevice.settings import ENV_VARS

if TYPE_CHECKING:
    from torchdevice.redirecting.runtime import Runtime
    from torchdevice.reporting import MigrationReport

__all__ = ["ENV_GROUP", "INSTALL_ORDER", "Activation", "Patch", "install", "installed", "spots"]

#: Ledger group of the environment variables exported for child processes.
ENV_GROUP: Final = "child environment"
#: The variable that switches redirection on in child processes.
ACTIVATE_VAR: Final = "ACTIVATE_TORCH_DEVICE"


@dataclass(frozen=True)
class Activation:
    """What an installer may need from the activation that runs it."""

    runtime: Runtime
    #: Push the mode on the calling thread (with its exit guard).
    enter_thread: Callable[[], None]
    #: Take the mode off the calling thread's stack.
    leave_thread: Callable[[], None]
    #: This process's own migration report (for the report's parts).
    own_report: Callable[[], MigrationReport]


#: When a patch is installed: ``"first"`` when redirection goes from off to on;
#: ``"every"`` at every activation (it depends on the host); ``"settings"``: by
#: ``enable()`` itself, from the settings, before the runtime exists (listed for the
#: ledger and the pristine check).
When = Literal["first", "every", "settings"]


@dataclass(frozen=True)
class Patch:
    """One patch of :data:`INSTALL_ORDER`: a family of changes to torch or the stdlib."""

    name: str
    #: The ledger groups its changes are recorded under.
    groups: tuple[str, ...]
    when: When
    #: Puts the changes in place (idempotent); ``None`` for ``"settings"`` patches.
    install: Callable[[Activation], None] | None
    #: Every spot it may change, on any host, described as the ledger describes it.
    spots: Callable[[], tuple[ledger.Spot, ...]]


# -- the patches whose code lives elsewhere ------------------------------------------------
def _log_spots() -> tuple[ledger.Spot, ...]:
    return (
        ledger.Spot("the 'torchdevice' logger's level", lambda: logs.logger.level),
        ledger.Spot("a stderr handler", lambda: tuple(logs.logger.handlers)),
    )


def _env_spots() -> tuple[ledger.Spot, ...]:
    return tuple(ledger.env_spot(name) for name in (ACTIVATE_VAR, *ENV_VARS))


def _uses_the_mode(activation: Activation) -> bool:
    """Whether the activation sees requests through the function mode (the default tier)."""
    return activation.runtime.settings.intercept == "mode"


def _install_threads(activation: Activation) -> None:
    if _uses_the_mode(activation):  # the entry-points tier's wrappers are process-wide
        threads.install(activation.enter_thread, activation.leave_thread)
        activation.enter_thread()


def _install_backward(activation: Activation) -> None:
    if _uses_the_mode(activation):  # the entry-points tier has no mode to lose
        from torchdevice.patches import backward  # noqa: PLC0415 - keeps import light

        backward.install(activation.enter_thread)


def _backward_spots() -> tuple[ledger.Spot, ...]:
    from torchdevice.patches import backward  # noqa: PLC0415 - keeps import light

    return backward.spots()


def _thread_spots() -> tuple[ledger.Spot, ...]:
    return (ledger.Spot("threading.setprofile", threading.getprofile),)


def _call_spots() -> tuple[ledger.Spot, ...]:
    return tuple(ledger.attr_spot(owner, name) for owner, name, _ in calls.REPLACEMENTS)


def _install_attribution(_: Activation) -> None:
    warning_hooks.attribute_warnings()


def _attribution_spots() -> tuple[ledger.Spot, ...]:
    import warnings  # noqa: PLC0415 - only the pristine check asks

    return (ledger.attr_spot(warnings, "_showwarnmsg"),)


def _install_amp(_: Activation) -> None:
    from torchdevice.patches import amp  # noqa: PLC0415 - keeps `import torchdevice` light

    amp.install()  # autocast and GradScaler on the real device type, every host


def _amp_spots() -> tuple[ledger.Spot, ...]:
    from torchdevice.patches import amp  # noqa: PLC0415 - keeps `import torchdevice` light

    return amp.spots()


def _install_native_observer(activation: Activation) -> None:
    """Count PyTorch's own MPS fallbacks in the report on MPS hosts (none elsewhere)."""
    if activation.runtime.host.kind == "mps":
        warning_hooks.observe_native()
    else:
        ledger.undo(warning_hooks.NATIVE_GROUP)


def _native_observer_spots() -> tuple[ledger.Spot, ...]:
    import warnings  # noqa: PLC0415 - only the pristine check asks

    return (ledger.attr_spot(warnings, "showwarning"),)


def _install_sharing(activation: Activation) -> None:
    """Let tensors of an accelerator without IPC (MPS) cross process boundaries."""
    from torchdevice.patches import sharing  # noqa: PLC0415 - keeps `import torchdevice` light

    accelerator = activation.runtime.default_device
    sharing.install(None if accelerator is None else accelerator.type)


def _sharing_spots() -> tuple[ledger.Spot, ...]:
    from torchdevice.patches import sharing  # noqa: PLC0415 - keeps `import torchdevice` light

    return sharing.spots()


def _install_facades(_: Activation) -> None:
    from torchdevice import facade  # noqa: PLC0415 - keeps `import torchdevice` light

    facade.install()  # per host: torch.cuda off CUDA, torch.mps off MPS


def _facade_spots() -> tuple[ledger.Spot, ...]:
    from torchdevice import facade  # noqa: PLC0415 - keeps `import torchdevice` light

    return facade.spots()


def _install_entry_points(activation: Activation) -> None:
    """The entry-points tier's wrappers (:mod:`torchdevice.redirecting.entry_points`), for the table
    of the host in force: after the facades, which let dynamo build its table of torch
    functions from the real ones first."""
    from torchdevice.redirecting import entry_points  # noqa: PLC0415 - only this tier needs it

    if _uses_the_mode(activation):
        ledger.undo(entry_points.GROUP)
    else:
        entry_points.install(activation.runtime.table)
        entry_points.warn_without_native_fallback(activation.runtime)


def _entry_point_spots() -> tuple[ledger.Spot, ...]:
    from torchdevice.redirecting import entry_points  # noqa: PLC0415 - only the pristine check asks

    return entry_points.spots()


def _install_net(_: Activation) -> None:
    net.install()  # below the mode: what reaches the dispatcher unseen (TorchScript)


def _install_report_parts(activation: Activation) -> None:
    from torchdevice.reporting import parts  # noqa: PLC0415 - keeps `import torchdevice` light

    parts.start(activation.own_report)  # one report for the run's processes


def _report_parts_spots() -> tuple[ledger.Spot, ...]:
    from torchdevice.reporting import parts  # noqa: PLC0415 - keeps `import torchdevice` light

    return (
        ledger.env_spot(parts.ENV),
        ledger.Spot("the migration report parts' exit handler", None),
    )


def _has_distributed() -> bool:
    import torch.distributed  # noqa: PLC0415 - torch has imported it already

    return torch.distributed.is_available()


def _install_distributed(_: Activation) -> None:
    """The ``torch.distributed`` wrappers (NCCL -> gloo, DDP, staging), where torch has it."""
    if _has_distributed():
        from torchdevice.patches import distributed  # noqa: PLC0415 - keeps import light

        distributed.install()


def _distributed_spots() -> tuple[ledger.Spot, ...]:
    if not _has_distributed():
        return ()
    from torchdevice.patches import distributed  # noqa: PLC0415 - keeps import light

    return distributed.spots()


def _install_data_parallel(_: Activation) -> None:
    """``nn.DataParallel`` as on a one-GPU machine, off CUDA hosts."""
    from torchdevice.patches import data_parallel  # noqa: PLC0415 - keeps import light

    data_parallel.install()


def _data_parallel_spots() -> tuple[ledger.Spot, ...]:
    from torchdevice.patches import data_parallel  # noqa: PLC0415 - keeps import light

    return data_parallel.spots()


def _install_data_loader(_: Activation) -> None:
    """No pin-memory thread where nothing can be pinned (as torch does on MPS)."""
    from torchdevice.patches import data_loader  # noqa: PLC0415 - keeps import light

    data_loader.install()


def _data_loader_spots() -> tuple[ledger.Spot, ...]:
    from torchdevice.patches import data_loader  # noqa: PLC0415 - keeps import light

    return data_loader.spots()


def _install_compiled_graphs(activation: Activation) -> None:
    """Graphs compiled under the function mode run without it where they can."""
    if _uses_the_mode(activation):  # the entry-points tier has no mode to take off
        from torchdevice.patches import compiled_graphs  # noqa: PLC0415 - keeps import light

        compiled_graphs.install()


def _compiled_graph_spots() -> tuple[ledger.Spot, ...]:
    from torchdevice.patches import compiled_graphs  # noqa: PLC0415 - keeps import light

    return compiled_graphs.spots()


#: Every change torchdevice makes outside itself, in the order activation makes them.
INSTALL_ORDER: Final[tuple[Patch, ...]] = (
    Patch("the log level", (logs.GROUP, logs.LAUNCHER_GROUP), "settings", None, _log_spots),
    Patch("variables for child processes", (ENV_GROUP,), "settings", None, _env_spots),
    Patch("thread hooks", (threads.GROUP,), "first", _install_threads, _thread_spots),
    Patch("autograd hooks", ("backward",), "first", _install_backward, _backward_spots),
    Patch("torch call wrappers", (calls.GROUP,), "first", lambda _: calls.install(), _call_spots),
    Patch(
        "warnings at the user's line",
        (warning_hooks.ATTRIBUTE_GROUP,),
        "first",
        _install_attribution,
        _attribution_spots,
    ),
    Patch("autocast rewrite", ("autocast rewrite",), "first", _install_amp, _amp_spots),
    Patch(
        "native MPS fallback observer",
        (warning_hooks.NATIVE_GROUP,),
        "every",
        _install_native_observer,
        _native_observer_spots,
    ),
    Patch(
        "accelerator tensor sharing",
        ("accelerator tensor sharing",),
        "every",
        _install_sharing,
        _sharing_spots,
    ),
    Patch(
        "facades",
        ("facades", "cuda facade", "mps facade", "accelerator facade"),
        "every",
        _install_facades,
        _facade_spots,
    ),
    Patch(
        "entry-point wrappers",
        ("entry-point wrappers",),
        "every",
        _install_entry_points,
        _entry_point_spots,
    ),
    Patch("dispatcher net", (net.GROUP,), "first", _install_net, net.spots),
    Patch("report parts", ("report parts",), "first", _install_report_parts, _report_parts_spots),
    Patch("distributed", ("distributed",), "first", _install_distributed, _distributed_spots),
    Patch(
        "data parallel", ("data_parallel",), "first", _install_data_parallel, _data_parallel_spots
    ),
    Patch("data loader", ("data loader",), "first", _install_data_loader, _data_loader_spots),
    Patch(
        "compiled graphs",
        ("compiled graphs",),
        "first",
        _install_compiled_graphs,
        _compiled_graph_spots,
    ),
)


def install(activation: Activation, *, first: bool) -> None:
    """Walk :data:`INSTALL_ORDER`: every patch when ``first`` (redirection was off), else
    the patches that follow the host. ``"settings"`` patches are ``enable()``'s."""
    for patch in INSTALL_ORDER:
        if patch.install is not None and (first or patch.when == "every"):
            patch.install(activation)


def installed() -> bool:
    """Whether the torch call wrappers are in place (the first patch with a witness)."""
    return calls.installed()


def spots() -> dict[str, ledger.Spot]:
    """Every spot :data:`INSTALL_ORDER` may change, keyed by its ledger description."""
    return {spot.what: spot for patch in INSTALL_ORDER for spot in patch.spots()}
