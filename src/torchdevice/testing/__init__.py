"""Test helpers for code that runs on accelerators, usable on machines that have none.

The simulated MPS device lives in :mod:`torchdevice.simulated_mps` (it is a user feature:
``--host simulated-mps``); this package re-exports what tests and users have imported from
here (:func:`register`, :func:`missing_ops`...), so ``from torchdevice.testing import
register`` keeps working. Importing it imports the simulated package, which announces the
device to the host probe without registering it.
"""

from __future__ import annotations

from torchdevice.simulated_mps import (
    DEFAULT_NAME,
    is_registered,
    missing_ops,
    register,
    registered_name,
    registered_overloads,
    registered_sparse_overloads,
    supported_ops,
    supported_sparse_ops,
)

__all__ = [
    "DEFAULT_NAME",
    "is_registered",
    "missing_ops",
    "register",
    "registered_name",
    "registered_overloads",
    "registered_sparse_overloads",
    "supported_ops",
    "supported_sparse_ops",
]
