"""NumPy, pandas and matplotlib given CPU tensors, as analysis and plotting code does.

CUDA-first code computes on the GPU and hands the ``.cpu()`` results to the host's
libraries without calling ``.numpy()``: ``np.asarray``/``np.array`` (with a ``dtype``),
NumPy functions and ufuncs on tensors (``__array__`` in, ``__array_wrap__`` back out to a
tensor), ``pd.DataFrame(t)``, ``plt.plot(t)``. The pandas and matplotlib parts run where
they are installed. Prints its facts as one JSON line.
"""

import importlib.util
import io
import json

import numpy as np
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"


def main() -> None:
    torch.manual_seed(0)
    weights = torch.randn(4, 6, device=device)
    scores = (weights @ weights.T).softmax(dim=-1)
    host = scores.cpu()
    facts: dict[str, object] = {}
    facts["asarray"] = np.asarray(host).tolist()
    facts["array64"] = np.array(host, dtype=np.float64).sum(axis=1).tolist()
    facts["array_dtype"] = str(np.asarray(host, dtype=np.float16).dtype)
    facts["argsort"] = np.argsort(host[0]).tolist()  # falls back to __array__
    facts["argmax"] = int(np.argmax(host[1]))
    facts["stacked"] = np.stack([host[0], host[1]]).shape
    facts["concatenated"] = np.concatenate([host, host]).shape
    facts["percentile"] = float(np.percentile(host, 90))
    wrapped = np.log(host)  # a ufunc: the result wrapped back as a tensor
    facts["wrapped_type"] = type(wrapped).__name__
    facts["wrapped_dtype"] = str(wrapped.dtype)
    facts["mixed"] = (host + wrapped).sum().item()  # mixes with the program's host tensors
    facts["greater"] = np.greater(host, 0.25).sum().item()
    labels = torch.arange(4, device=device).cpu()
    if importlib.util.find_spec("pandas") is not None:
        import pandas as pd

        frame = pd.DataFrame(host, columns=list("abcd"))
        frame["label"] = pd.Series(labels)
        facts["pandas"] = frame.groupby("label").sum().round(6).values.tolist()
    if importlib.util.find_spec("matplotlib") is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, axes = plt.subplots()
        (line,) = axes.plot(labels, host[:, 1])
        counts, _, _ = axes.hist(host.flatten(), bins=4)
        facts["matplotlib"] = [np.asarray(line.get_ydata()).tolist(), counts.tolist()]
        figure.savefig(io.BytesIO(), format="png")
        plt.close(figure)
    # Last, as it writes: natively the array shares the CPU tensor's memory.
    view = np.asarray(host)
    view[0, 0] = 7.0
    facts["array_writes_reach_tensor"] = host[0, 0].item() == 7.0
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
