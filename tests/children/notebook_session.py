"""A notebook session, driven with IPython's own test shell (tests/test_notebook.py).

``%load_ext torchdevice``, cells that ask for CUDA, the ``%torchdevice`` magic, a cell's
own ``with torchdevice.redirect():`` after ``%torchdevice off``, and ``%unload_ext``. What
each step gave is printed as one JSON object on the last line.
"""

from __future__ import annotations

import json

from IPython.testing import tools
from IPython.testing.globalipapp import start_ipython

shell = start_ipython()
seen: dict[str, object] = {}

with tools.AssertPrints("torchdevice: on (%load_ext torchdevice), redirecting to"):
    shell.run_line_magic("load_ext", "torchdevice")

cell = shell.run_cell('import torch\nx = torch.ones(2, device="cuda")\nstr(x.device), x.tolist()')
seen["loaded"] = cell.result

report = shell.run_line_magic("torchdevice", "report")
seen["report_type"] = type(report).__name__
seen["rows"] = [(e.api, e.requested, e.decided, e.count, e.site.lineno) for e in report.entries]
seen["table"] = report._repr_html_()
seen["markdown"] = shell.run_line_magic("torchdevice", "report markdown")._repr_markdown_()
page = shell.run_line_magic("torchdevice", "report html")
seen["page"] = [page._repr_html_(), page.text]

with tools.AssertPrints("torchdevice: off; so far 1 call(s) at 1 site(s)"):
    shell.run_line_magic("torchdevice", "off")
native = shell.run_cell('torch.zeros(1, device="cuda")')
seen["off"] = type(native.error_in_exec).__name__

scoped = shell.run_cell(
    "import torchdevice\n"
    "with torchdevice.redirect():\n"
    '    y = torch.zeros(1, device="cuda")\n'
    "    inside = torchdevice.is_enabled()\n"
    "str(y.device), inside, torchdevice.is_enabled()"
)
seen["scoped"] = scoped.result
seen["after_scope"] = shell.run_cell("torchdevice.is_enabled()").result
seen["total"] = shell.run_line_magic("torchdevice", "report").total

bad = shell.run_cell("%torchdevice sideways")
seen["bad"] = [type(bad.error_in_exec).__name__, str(bad.error_in_exec)]

with tools.AssertPrints("torchdevice: on, redirecting to"):
    shell.run_line_magic("torchdevice", "on")
with tools.AssertPrints("torchdevice: off;"):
    shell.run_line_magic("unload_ext", "torchdevice")
seen["unloaded"] = shell.run_cell("torchdevice.is_enabled()").result

print(json.dumps(seen))
