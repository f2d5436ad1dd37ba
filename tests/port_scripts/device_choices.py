"""The device-choice idiom in the forms people write it (issue 28), CUDA-first and MPS-first:
as a string and as ``torch.device``, with an index, chained, as ``if``/``elif``/``else``, in a
function, inline as an argument, and compared with a string. Each one picks the device every
tensor here goes to.

Its last line, ``RESULT ...``, is what the port tests compare between runs.
"""

import torch

DEVICE = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
as_string = "cuda" if torch.cuda.is_available() else "cpu"
mps_string = "mps" if torch.backends.mps.is_available() else "cpu"
mps_device = torch.device("mps" if torch.backends.mps.is_available() else "cpu")
chained = (
    "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
)
if torch.cuda.is_available():
    picked = torch.device("cuda")
elif torch.backends.mps.is_available():
    picked = torch.device("mps")
else:
    picked = torch.device("cpu")
non_blocking = as_string != "cpu"


def local_choice() -> torch.Tensor:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.arange(3.0, device=device)


values = [
    torch.ones(2, device=DEVICE),
    torch.ones(2, device=as_string) * 2,
    torch.ones(2, device=mps_string) * 3,
    torch.ones(2, device=mps_device) * 4,
    torch.ones(2, device=chained) * 5,
    torch.ones(2, device=picked) * 6,
    torch.ones(2).to("cuda" if torch.cuda.is_available() else "cpu", non_blocking=non_blocking) * 7,
    local_choice(),
]
assert len({value.device for value in values}) == 1, [value.device for value in values]
print("RESULT", sum(value.sum().item() for value in values))
