"""Run a script on the simulated accelerator (the MPS stand-in): a test-only launcher.

``torchrun ... on_simgpu.py SCRIPT ARGS...`` enables torchdevice with the simulated MPS host
in the worker (which registers the simulated device) and runs ``SCRIPT`` as ``__main__``
with its own ``sys.argv``. The script itself stays as users write it. Users get the same
with ``TORCHDEVICE_HOST=simulated-mps torchrun ... -m torchdevice SCRIPT``.
"""

import runpy
import sys

import torchdevice

torchdevice.enable(host="simulated-mps")
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
