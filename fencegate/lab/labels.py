"""Where a timeline's labels go so that none covers another: a width estimate and rows of labels.

The report is plain SVG without script, so nothing measures text when it is
drawn: `text_width` estimates it from per-character advances a little wider
than DejaVu Sans's (what Debian's Chromium renders `system-ui, sans-serif`
with; narrower fonts only leave more room). `Rows` puts each label in the
first row where it overlaps no label already there, opening a new row when
none has room, so a burst of events costs height, never legibility. Fed in
order of x, first fit uses as few rows as any layout could.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Advance widths in em, rounded up from DejaVu Sans's; anything not listed counts as EM_OTHER.
_EM = {
    **dict.fromkeys("ijl.,:;'|!", 0.34),
    **dict.fromkeys("frt /()-[]", 0.44),
    **dict.fromkeys("mwMW", 1.02),
    **dict.fromkeys("ABCDEFGHIJKLNOPQRSTUVXYZ", 0.8),
    **dict.fromkeys("0123456789abcdeghknopqsuvxyz", 0.66),
}
EM_OTHER = 0.9  # symbols (✓ ✗ + = %) and letters outside ASCII
SLACK = 2.0  # px, for rounding and hinting


def text_width(text: str, size: float) -> float:
    """A width in px that `text` at font-size `size` does not exceed in DejaVu Sans."""
    return sum(_EM.get(char, EM_OTHER) for char in text) * size + SLACK


@dataclass
class Rows:
    """Horizontal rows of labels; `place` answers the row a label goes in (0 is the first)."""

    gap: float = 4.0  # px kept free between two labels of one row
    rows: list[list[tuple[float, float]]] = field(default_factory=list)

    def _free(self, row: list[tuple[float, float]], x: float, width: float) -> bool:
        return all(x + width + self.gap <= start or end + self.gap <= x for start, end in row)

    def place(self, x: float, width: float) -> int:
        """The row the label [x, x + width] now occupies: the first with room, else a new one."""
        for index, row in enumerate(self.rows):
            if self._free(row, x, width):
                row.append((x, x + width))
                return index
        self.rows.append([(x, x + width)])
        return len(self.rows) - 1

    def place_in_one_row(self, x: float, width: float) -> bool:
        """Put the label in the only row if it has room (True); for labels that may be left out (ticks)."""
        if not self.rows:
            self.rows.append([])
        if not self._free(self.rows[0], x, width):
            return False
        self.rows[0].append((x, x + width))
        return True

    def __len__(self) -> int:
        return len(self.rows)


__all__ = ["Rows", "text_width"]
