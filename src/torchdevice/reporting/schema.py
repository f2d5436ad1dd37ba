"""The JSON migration report's schema: a versioned pydantic model.

What ``MigrationReport.to_json`` writes is validated against :class:`ReportSchema` first, so a
report on disk always matches the schema its ``schema_version`` names; tools that read
reports (``torchdevice port``, a CI job) can rely on it. The JSON Schema itself is
published in the docs (``docs/report-schema.json``; ``python -m
torchdevice.reporting.schema`` prints it, and a test keeps the file in step).

Kept apart from :mod:`torchdevice.reporting.report` so that ``import torchdevice`` does
not import pydantic: only writing or reading JSON does.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from torchdevice.reporting.entries import SCHEMA_VERSION, EventKind

__all__ = ["EntrySchema", "ReportSchema", "json_schema"]


# The JSON forms of a row (reporting.entries.Entry) and of a MigrationReport. Their
# docstrings and titles are what the published schema says, so they speak of an entry
# and a report, as a reader of the JSON does.


class EntrySchema(BaseModel):
    """One call site: what the code asked for there, what it got, and what to change."""

    model_config = ConfigDict(extra="forbid", title="Entry")

    file: str = Field(description="The file of the call, as Python names it.")
    line: int = Field(ge=0, description="The line of the call (0: called from C).")
    function: str = Field(description="The function the call was made in.")
    kind: EventKind = Field(
        description="redirect: a device argument moved; fallback: an op rerun on the CPU; "
        "override: the cpu:-1 override; dtype: float64 narrowed on MPS; device-api: a "
        "torch.cuda/torch.mps call the facade answered."
    )
    api: str = Field(description="The API called, e.g. torch.zeros, Module.cuda.")
    requested: str = Field(description="The device asked for ('none': no device given).")
    decided: str = Field(description="The device the call got.")
    reason: str = Field(description="Why, as the policy says it.")
    count: int = Field(ge=1, description="How many calls, all processes together.")
    positions: list[tuple[int, int, int, int]] = Field(
        default_factory=list,
        description="Exact spans of the calls at this line: [line, end line, column, end "
        "column], columns as UTF-8 byte offsets (Python 3.11+; empty before).",
    )
    library: str | None = Field(
        None, description="The installed package the file belongs to; null: the user's code."
    )
    to_change: bool = Field(
        description="Whether the line is device-specific code to port (false: the host's "
        "business, e.g. an op that fell back to the CPU)."
    )
    advice: str = Field(description="What the call becomes in device-agnostic code.")


class ReportSchema(BaseModel):
    """A migration report: every call site that was redirected or fell back."""

    model_config = ConfigDict(extra="forbid", title="Report")

    schema_version: Literal[1] = Field(description="The version of this schema.")
    host: str = Field(description="The host that ran the code, and its device.")
    total_calls: int = Field(ge=0)
    call_sites: int = Field(ge=0)
    processes: int = Field(ge=1, description="Processes whose records are merged here.")
    ranks: list[int] = Field(description="The distinct ranks among them, when known.")
    entries: list[EntrySchema]


assert SCHEMA_VERSION == 1, "update ReportSchema.schema_version with SCHEMA_VERSION"


#: Pydantic names a definition after its class; the published schema (version 1) names the
#: row's ``Entry``, and readers refer to ``#/$defs/Entry``: the classes' names stay ours.
_PUBLISHED_DEFS = {"EntrySchema": "Entry"}


def json_schema() -> str:
    """The JSON Schema of :class:`ReportSchema`, as published in the docs."""
    text = json.dumps(ReportSchema.model_json_schema(), indent=2, sort_keys=True) + "\n"
    for ours, published in _PUBLISHED_DEFS.items():
        text = text.replace(f'"{ours}"', f'"{published}"')
        text = text.replace(f'"#/$defs/{ours}"', f'"#/$defs/{published}"')
    return json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(json_schema(), end="")
