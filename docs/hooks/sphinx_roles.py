"""Griffe extension for the API reference: Sphinx roles in docstrings become code spans.

torchdevice's docstrings use Sphinx roles (``:class:`~torchdevice.host.Host```,
``:func:`enable```), which Markdown would print verbatim. This rewrites each role to a code
span of the name it shows: the last component for ``~``-prefixed targets, the whole target
otherwise. Loaded by ``mkdocs.yml`` (mkdocstrings' ``extensions`` option).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj|const):`(~?)([^`]+)`")


def _replace(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if tilde else target}`"


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx cross-reference roles in every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_replace, obj.docstring.value)
