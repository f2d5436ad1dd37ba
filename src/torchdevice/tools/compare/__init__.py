"""``torchdevice compare``: run a project's tests natively and redirected, report the difference.

::

    torchdevice compare [--output DIR] [--quiet] [--max-redirected-lines [N]] [--] [PYTEST ARGS...]

Runs ``python -m pytest PYTEST ARGS`` twice, one after the other, in child processes: once
natively (``ACTIVATE_TORCH_DEVICE``/``TORCH_ALLOW_REDIRECTS`` removed from the environment),
once with ``--torchdevice``. Both load :mod:`torchdevice.tools.compare_plugin`, which writes one
JSON line per finished test; the parent reads those lines while the child runs (the
progress display) and afterwards (the results). ``--continue-on-collection-errors`` is
added so that a module failing to import in one run does not stop that run.

``DIR`` (default ``torchdevice-compare``) receives:

``compare.json``
    ``format`` (``"torchdevice-compare/1"``), ``pytest_args``, ``host``, ``interrupted``
    (``null``, or the run Ctrl-C stopped), ``runs`` (per run:
    ``command``, ``exit_code``, ``duration_s``, ``collected``, ``totals``), ``tests`` (per
    node id: ``category`` and the ``native`` and ``redirected`` results: ``outcome``,
    ``message``, ``duration``, ``redirects``, ``fallbacks``), and the node-id lists
    ``regressions``, ``redirected_only``, ``native_only``, ``fixed``.
``compare.md``
    the same for a person: totals and pass rates, then each list as a table.
``native.log``, ``redirected.log``, ``native.jsonl``, ``redirected.jsonl``
    the children's terminal output and raw results; ``migration-report.json``: the
    redirected run's migration report (merged over xdist workers).

Categories: ``regression`` passes natively (passed/xfailed) and fails redirected
(failed/error/xpassed); ``redirected_only`` is skipped or absent natively and runs
redirected (GPU-only tests on a host without one); ``native_only`` the reverse; ``fixed``
fails natively and passes redirected; ``same`` otherwise. The pass rate of a run is
passed / (passed + failed + error): the tests that ran to a verdict.

Before either run, a bad ``TORCHDEVICE_*`` value or pytest arguments pytest rejects (checked
by a pytest child that collects nothing, :func:`~torchdevice.tools.compare.runner.check_arguments`)
stop compare with one line and status 2. Ctrl-C stops the running child and its children,
writes both reports with the tests that finished (``compare.json``'s ``interrupted`` names
the run) and exits with status 130.

Exit status: 0, or 1 when there is a regression, or 2 for a usage error or when a run
ended abnormally (pytest exit status 2-4: interrupted, internal error, usage error; see its
``.log``), or 130 after Ctrl-C. With ``--max-redirected-lines [N]`` (the CI gate,
:mod:`torchdevice.tools.gate`; 0 when given alone), a comparison that would exit 0 exits
3 when the redirected run's migration report holds more than ``N`` of the user's lines,
listed on stderr.

The tests are listed in pytest's order of parametrizations: ``test[2]`` before
``test[10]`` (numbers in node ids compare as numbers).
"""

from __future__ import annotations

from torchdevice.tools.compare.model import (
    Comparison,
    RunResult,
    TestResult,
    categorize,
    compare_runs,
)
from torchdevice.tools.compare.render import render_markdown, write
from torchdevice.tools.compare.runner import main, read_results, run_pytest

__all__ = [
    "Comparison",
    "RunResult",
    "TestResult",
    "categorize",
    "compare_runs",
    "main",
    "read_results",
    "render_markdown",
    "run_pytest",
    "write",
]
