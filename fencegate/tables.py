"""Plain-text and Markdown tables: the one renderer behind the lab's, the benchmarks' and the model's output.

Columns are separated by two spaces and sized to their widest cell; the
columns named in `right` (numbers) are right-aligned, so digits line up.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence


def grid(
    header: Sequence[str], rows: Sequence[Sequence[str]], *, right: Collection[int] = (), indent: str = ""
) -> str:
    """Aligned columns under a header and a rule of dashes; trailing blanks are trimmed."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        aligned = (
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        )
        return (indent + "  ".join(aligned)).rstrip()

    return "\n".join([line(header), indent + "  ".join("-" * width for width in widths), *map(line, rows)])


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


__all__ = ["grid", "markdown"]
