"""Health findings are marked on the affected chart at their onset step (warnings and errors only)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from grpo_dashboard.store.db import Run, Store
from grpo_dashboard.store.ingest import ingest_file
from grpo_dashboard.views import charts


@dataclass
class F:
    rule: str
    severity: str
    step: int
    metric: str | None


def test_findings_draw_a_line_on_their_metric_panel(tmp_path: Path) -> None:
    store = Store()
    store.insert_run(
        Run(
            id="r",
            name="r",
            spec_yaml="",
            backend="local",
            status="running",
            created_at=time.time(),
            run_dir=str(tmp_path),
        )
    )
    path = tmp_path / "metrics.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {
                    "v": 1,
                    "type": "log",
                    "split": "train",
                    "step": s,
                    "time": float(s),
                    "metrics": {"entropy": 4.0 / s, "reward": 0.1 * s},
                }
            )
            + "\n"
            for s in range(1, 21)
        )
    )
    ingest_file(store, "r", path)
    found = [
        F("entropy_collapse", "error", 12, "entropy"),
        F("plateau", "info", 3, "reward"),
        F("x", "error", 2, None),
    ]
    figs = charts.run_figures(store, "r", charts.ChartOptions(), findings=found)
    groups = charts.group_metrics(store.metric_keys("r"))
    entropy_panel = next(pid for pid, keys in groups.items() if "entropy" in keys)
    shapes = figs[entropy_panel].layout.shapes
    assert [(s.x0, s.line.color) for s in shapes] == [(12, charts.FINDING_COLORS["error"])]
    assert any(a.text == "entropy_collapse" for a in figs[entropy_panel].layout.annotations)
    others = [pid for pid in figs if pid != entropy_panel]
    assert not any(s.x0 == 3 for pid in others for s in (figs[pid].layout.shapes or []))  # info is not marked
    wall = charts.run_figures(store, "r", charts.ChartOptions(xaxis="wall time"), findings=found)
    assert not wall[entropy_panel].layout.shapes
