"""The IPython extension: ``%load_ext torchdevice`` redirects a Jupyter kernel, and the
``%torchdevice`` line magic says what it did.

Why an extension: a notebook has no script for ``python -m torchdevice`` to run and, in
a kernel that lives for hours, no exit at which to print the report. Loading the extension
enables torchdevice for the kernel, as ``torchdevice.enable()`` would at the top of a
script, and says so in one line; the report is there whenever it is asked for:

- ``%torchdevice`` (or ``%torchdevice status``): on or off, where requests go, and how
  much was redirected so far;
- ``%torchdevice report [text|markdown|html|json]``: the migration report so far, shown
  as a table (the report object's ``_repr_html_``), or in the format named;
- ``%torchdevice on`` / ``off``: enable or disable (what ``%unload_ext`` also does);
- ``%torchdevice reset``: start a new report.

A notebook names no accelerator before its cells run, so on a CPU-only host the kernel
stands for a CUDA machine (the ``written_for`` option, ``TORCHDEVICE_WRITTEN_FOR=mps``,
says otherwise). The options are read from the environment, as for ``enable()``
(``TORCHDEVICE_HOST`` naming the simulated MPS host in the kernel's environment, say).
docs/notebooks.md says where the report goes and what a cell's own
``with torchdevice.redirect():`` does.
"""

from __future__ import annotations

from html import escape
from typing import Any, Final

from torchdevice import activation, announce, program

__all__ = ["load_ipython_extension", "torchdevice_magic", "unload_ipython_extension"]

_FORMATS: Final = ("text", "markdown", "html", "json")
_USAGE: Final = "usage: %torchdevice [status | on | off | reset | report [text|markdown|html|json]]"

#: Where the kernel's program is read from: no cell has run yet when the extension loads.
_KERNEL: Final = program.Reading(
    "cuda", "a notebook kernel (no cell read yet): CUDA, as a CPU-only host stands for"
)


class MagicUsageError(ValueError):
    """``%torchdevice`` was given words it does not take."""


def _enable() -> None:
    activation.enable_for(lambda: _KERNEL, {})


def status() -> str:
    """One line: on (where requests go) or off, and what was redirected so far."""
    runtime = activation.current_runtime()
    said = "off" if runtime is None else f"on, {activation.describe(runtime)}"
    report = activation.report()
    return f"torchdevice: {said}; so far {report.total} call(s) at {len(report.entries)} site(s)"


def torchdevice_magic(line: str) -> Any:
    """``%torchdevice [status | on | off | reset | report [FORMAT]]`` (the module docstring).

    ``report`` returns the report object (a notebook shows it as a table), or with a
    format, an object that displays the text in that format; the other words print one
    line and return nothing.
    """
    words = line.split()
    command = words[0] if words else "status"
    if command == "report" and len(words) <= 2:
        report = activation.report()
        if len(words) == 1:
            return report
        form = words[1]
        if form not in _FORMATS:
            raise MagicUsageError(f"no report format {form!r}: one of {', '.join(_FORMATS)}")
        return _Shown(report.render(form), form)
    if len(words) > 1 or command not in ("status", "on", "off", "reset"):
        raise MagicUsageError(_USAGE)
    if command == "on":
        _enable()
    elif command == "off":
        activation.disable()
    elif command == "reset":
        activation.reset_report()
    print(status())
    return None


class _Shown:
    """A report rendered in one format, displayed as that format (Markdown rendered by the
    notebook, the HTML page in a frame, text and JSON as they are)."""

    def __init__(self, text: str, form: str) -> None:
        self.text = text
        self.form = form

    def __repr__(self) -> str:
        return self.text

    def _repr_html_(self) -> str | None:
        """The page in a frame of its own: its style must not restyle the notebook."""
        if self.form != "html":
            return None
        return (
            f'<iframe srcdoc="{escape(self.text, quote=True)}" title="torchdevice migration '
            'report" style="width: 100%; height: 32em; border: 1px solid #ccc"></iframe>'
        )

    def _repr_markdown_(self) -> str | None:
        return self.text if self.form == "markdown" else None


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext torchdevice``: enable for the kernel, one line saying so, and the magic."""
    _enable()
    ipython.register_magic_function(torchdevice_magic, magic_kind="line", magic_name="torchdevice")
    print(announce.start_line(" (%load_ext torchdevice)"))


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext torchdevice``: disable; torch is as it was before the extension."""
    activation.disable()
    print(status())
