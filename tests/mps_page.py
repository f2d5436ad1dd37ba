"""PyTorch's MPS page's program (docs "MPS backend"), the form of the availability check
``torchdevice port`` must unwrap: the work in the ``else:`` branch, the other branch only
saying why there is no MPS (its nested ``is_built()`` check), blank and comment lines in
the work, and a multi-line string in it that must keep its lines.

Ported, it printed "MPS not available ... not built with MPS enabled." and did nothing on
the CPU (issue 36 item 6). tests/test_port.py checks the ported text from report rows;
tests/test_first_hour.py ports it with the command line, applies the patch and runs it.
"""

from __future__ import annotations

from pathlib import Path

SOURCE = '''\
import torch

# Check that MPS is available
if not torch.backends.mps.is_available():
    if not torch.backends.mps.is_built():
        print("MPS not available because the current PyTorch install was not "
              "built with MPS enabled.")
    else:
        print("MPS not available because the current MacOS version is not 12.3+ "
              "and/or you do not have an MPS-enabled device on this machine.")

else:
    mps_device = torch.device("mps")

    # Create a Tensor directly on the mps device
    x = torch.ones(5, device=mps_device)
    # Or
    x = torch.ones(5, device="mps")

    # Any operation happens on the GPU
    y = x * 2

    # Move your model to mps just like any other device
    model = torch.nn.Linear(5, 1)
    model.to(mps_device)

    # Now every call will run on the GPU
    pred = model(x)
    note = """two
    lines"""
    print("pred", tuple(pred.shape), y.sum().item(), note)
'''

#: What the ported program prints when it runs natively on the CPU: its work.
PRINTS = "pred (1,) 10.0 two\n    lines\n"


def write(directory: Path, name: str = "mps_page.py") -> Path:
    """The program, written to ``directory/name``."""
    path = directory / name
    path.write_text(SOURCE, encoding="utf-8")
    return path
