"""A benchmark's output: its results, and the goals checked as same-run ratios."""

from __future__ import annotations

from dataclasses import dataclass, field

from fencegate.bench.runner import Result, table


@dataclass(frozen=True)
class Goal:
    """A same-run ratio and the bound it should meet.

    `note` says, from the same run, what this machine allows: printed beside
    a goal that is not met, so a reader can tell a slow client from a bound
    the hardware sets.
    """

    name: str
    value: float
    op: str  # ">=" or "<="
    bound: float
    note: str = ""

    @property
    def met(self) -> bool:
        return self.value >= self.bound if self.op == ">=" else self.value <= self.bound

    def as_dict(self) -> dict[str, object]:
        return {"goal": self.name, "value": round(self.value, 3), "op": self.op,
                "bound": round(self.bound, 3), "met": self.met, "note": self.note}  # fmt: skip


@dataclass
class Section:
    name: str
    title: str
    results: list[Result]
    goals: list[Goal] = field(default_factory=list)
    extra: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "title": self.title,
            "results": [r.as_dict() for r in self.results],
            "goals": [g.as_dict() for g in self.goals],
            "extra": {k: round(v, 3) for k, v in self.extra.items()},
        }

    def render(self) -> str:
        lines = [f"## {self.name}: {self.title}", table(self.results)]
        lines += [f"  {k}: {v:.3f}" for k, v in self.extra.items()]
        for g in self.goals:
            mark = "met" if g.met else "NOT met" + (f": {g.note}" if g.note else "")
            lines.append(f"  goal {g.name}: {g.value:.2f} {g.op} {g.bound:.2f}  [{mark}]")
        return "\n".join(lines)
