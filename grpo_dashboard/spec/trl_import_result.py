"""What importing a TRL recipe gives: the spec, the mapping table's rows (one per key and step) and TRL's check."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from grpo_dashboard.spec.run_spec import RunSpec
from grpo_dashboard.spec.trl_versions import LATEST


@dataclass
class Row:
    """One line of the mapping table."""

    key: str
    value: Any
    action: str  # mapped | converted | pinned | dropped | unsupported | ignored
    target: str | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return dataclasses.asdict(self)


@dataclass
class ImportResult:
    """The spec, the mapping table, the TRL version whose defaults were applied, and TRL's own check."""

    spec: RunSpec
    rows: list[Row] = field(default_factory=list)
    trl_version: str = LATEST
    version_reason: str = ""
    trl_check: str | None = None

    def missing(self) -> list[str]:
        """What the spec needs and the recipe did not name: 'model', 'dataset', 'reward'."""
        s = self.spec
        have = {
            "model": bool(s.model.name_or_path),
            "dataset": bool(s.dataset.path or s.dataset.data_files or s.dataset.mixture),
            "reward": bool(s.rewards),
        }
        return [k for k, ok in have.items() if not ok]

    def summary(self) -> str:
        """One line: how many keys were kept, converted, pinned and dropped (unsupported and ignored among them)."""
        n = {a: sum(r.action == a for r in self.rows) for a in ACTIONS}
        dropped = n["dropped"] + n["unsupported"] + n["ignored"]
        detail = [f"{n[a]} {label}" for a, label in (("unsupported", "unsupported"), ("ignored", "unknown")) if n[a]]
        return f"{n['mapped']} kept, {n['converted']} converted, {n['pinned']} pinned, {dropped} dropped" + (
            f" ({', '.join(detail)})" if detail else ""
        )

    def table(self) -> str:
        """The mapping table as aligned text."""
        lines = [f"{'KEY':<34} {'ACTION':<11} {'SPEC FIELD':<38} NOTE"]
        for r in self.rows:
            lines.append(f"{r.key:<34} {r.action:<11} {r.target or '-':<38} {r.note}".rstrip())
        return "\n".join(lines)


ACTIONS = ("mapped", "converted", "pinned", "dropped", "unsupported", "ignored")
MISSING_HINT = {
    "model": "--model ORG/MODEL",
    "dataset": "--dataset ORG/DATASET",
    "reward": "--reward NAME (a TRL or open-r1 reward name, a built-in, or a dotted path)",
}


def missing_hint(missing: list[str]) -> str:
    """The line that tells what a recipe lacks and the import-trl options that give it."""
    return (
        f"the recipe names no {', no '.join(missing)}: import it again with "
        + " ".join(MISSING_HINT[m] for m in missing)
        + ", or set it in the spec"
    )
