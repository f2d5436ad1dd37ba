"""``compare.json`` and ``compare.md``: a comparison for machines and for a person."""

from __future__ import annotations

import json
from pathlib import Path

from torchdevice.tools.compare.model import OUTCOMES, Comparison

__all__ = ["rate", "render_markdown", "write"]


# -- Markdown --------------------------------------------------------------------------
def _cell(text: object) -> str:
    """Text that cannot break a Markdown table row."""
    return str(text).replace("|", "\\|").replace("\n", " ").replace("`", "'")


def rate(value: float | None) -> str:
    """A pass rate as a percentage (or a dash when no test reached a verdict)."""
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _count(value: int | None) -> str:
    return "" if value is None else str(value)


def _table(header: str, align: str, body: list[str]) -> list[str]:
    """A Markdown table of ``body`` rows, or "None." when there is no row."""
    return [header, align, *body] if body else ["None."]


def render_markdown(comparison: Comparison) -> str:
    """``compare.md``: totals and pass rates, then the tests that differ."""
    native, redirected = comparison.native.totals(), comparison.redirected.totals()
    rows = comparison.rows()
    lines = [
        "# torchdevice compare: native vs redirected",
        "",
        f"- pytest arguments: `{' '.join(comparison.pytest_args) or '(none)'}`",
        f"- host: {comparison.host or 'unknown'}",
        f"- exit status: native {comparison.native.exit_code}, "
        f"redirected {comparison.redirected.exit_code}",
    ]
    if comparison.interrupted is not None:
        lines.append(
            f"- **interrupted** (Ctrl-C) during the {comparison.interrupted} run: the results "
            "below are only the tests that finished"
        )
    lines += [
        "",
        "## Totals",
        "",
        "| | native | redirected |",
        "| --- | ---: | ---: |",
        f"| tests | {native['tests']} | {redirected['tests']} |",
    ]
    lines += [f"| {outcome} | {native[outcome]} | {redirected[outcome]} |" for outcome in OUTCOMES]
    lines.append(
        f"| pass rate (passed / passed+failed+error) | {rate(native['pass_rate'])} "
        f"| {rate(redirected['pass_rate'])} |"
    )
    lines.append(
        f"| duration | {comparison.native.duration_s:.1f} s "
        f"| {comparison.redirected.duration_s:.1f} s |"
    )
    regressions = [row for row in rows if row[3] == "regression"]
    lines += ["", f"## Pass natively, fail redirected ({len(regressions)})", ""]
    lines += _table(
        "| test | redirected | first error line | redirects | fallbacks |",
        "| --- | --- | --- | ---: | ---: |",
        [
            f"| `{_cell(nodeid)}` | {red.outcome} | {_cell(red.message)} "
            f"| {_count(red.redirects)} | {_count(red.fallbacks)} |"
            for nodeid, _, red, _ in regressions
        ],
    )
    only = [row for row in rows if row[3] == "redirected_only"]
    lines += [
        "",
        f"## Run only redirected ({len(only)})",
        "",
        "Skipped (or absent) natively, run redirected: e.g. GPU-only tests on a host without one.",
        "",
    ]
    lines += _table(
        "| test | redirected | first error line | native skip reason |",
        "| --- | --- | --- | --- |",
        [
            f"| `{_cell(nodeid)}` | {red.outcome} | {_cell(red.message)} | {_cell(nat.message)} |"
            for nodeid, nat, red, _ in only
        ],
    )
    for category, title in (
        ("native_only", "Run only natively"),
        ("fixed", "Fail natively, pass redirected"),
    ):
        chosen = [row for row in rows if row[3] == category]
        lines += ["", f"## {title} ({len(chosen)})", ""]
        lines += _table(
            "| test | native | redirected | redirected message |",
            "| --- | --- | --- | --- |",
            [
                f"| `{_cell(nodeid)}` | {nat.outcome} | {red.outcome} | {_cell(red.message)} |"
                for nodeid, nat, red, _ in chosen
            ],
        )
    return "\n".join(lines) + "\n"


def write(comparison: Comparison, output: Path) -> tuple[Path, Path]:
    """Write ``compare.json`` and ``compare.md`` into ``output``."""
    json_path, md_path = output / "compare.json", output / "compare.md"
    json_path.write_text(json.dumps(comparison.to_dict(), indent=2) + "\n", encoding="utf-8")
    md_path.write_text(render_markdown(comparison), encoding="utf-8")
    return json_path, md_path
