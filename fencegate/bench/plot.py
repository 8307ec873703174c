"""PNG bar charts of a run's medians, one per benchmark (matplotlib, headless)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

from fencegate.bench.section import Section


def plot_sections(sections: Sequence[Section], directory: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for section in sections:
        names = [f"{r.group}\n{r.name}" if r.group != section.name else r.name for r in section.results]
        rates = [r.median_rate for r in section.results]
        fig, ax = plt.subplots(figsize=(10, 0.5 + 0.45 * len(names)))
        ax.barh(names, rates, color="#3b6ea5")
        ax.invert_yaxis()
        ax.set_xlabel("median per second (higher is better)")
        ax.set_title(textwrap.fill(section.title, 100), fontsize=9)  # long titles say which workload is which
        fig.tight_layout()
        path = directory / f"{section.name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
