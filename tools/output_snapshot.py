"""The dashboard's outputs for one store as canonical JSON: what a refactor must leave byte-identical.

Imports every log under the given folders (default: tests/fixtures/real_logs and, where it exists,
../shared/realdata/grpo_logs) into a fresh store, then writes, per run, the chart JSON the page gets (default
options and log-scale/wall-time ones), the doctor's findings, badge and report, and the runs table. Run ids, paths
and creation times (random or clock-made at import) are replaced by stable names.

    python tools/output_snapshot.py -o before.json [LOG_DIR ...]
    python tools/output_snapshot.py -o after.json && cmp before.json after.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOW = 1_800_000_000.0


def _logs(dirs: list[Path]) -> list[Path]:
    return sorted(
        p
        for d in dirs
        if d.is_dir()
        for p in d.iterdir()
        if p.suffix in (".jsonl", ".json") and p.name != "expect.json"
    )


def snapshot(dirs: list[Path]) -> str:
    """The canonical JSON text of every output for a store built from the logs in `dirs`."""
    sys.path.insert(0, str(ROOT))
    from grpo_dashboard.health import diagnose
    from grpo_dashboard.spec.run_spec import RunSpec
    from grpo_dashboard.store.db import Run, RunStatus, Store
    from grpo_dashboard.store.importers import import_run
    from grpo_dashboard.store.ingest import ingest_file
    from grpo_dashboard.views import chart_json, overview
    from grpo_dashboard.views.charts import ChartOptions

    began = time.time()
    store = Store()
    names: dict[str, str] = {}
    for i, path in enumerate(_logs(dirs)):
        try:
            run = import_run(path, store, name=f"log{i:03d}-{path.stem[:40]}")
        except Exception as exc:  # a log the importer refuses is part of the output too
            names[f"refused:{path.name}"] = f"{type(exc).__name__}: {exc}"
            continue
        names[run.id] = f"run{i:03d}"
    for i, spec_path in enumerate(sorted((ROOT / "examples").glob("*.yaml"))):  # runs launched from a spec
        run_id = f"spec{i:03d}"
        run_dir = Path(os.environ["GRPO_DASHBOARD_DATA_DIR"]) / "runs" / run_id
        run_dir.mkdir(parents=True)
        shutil.copy(ROOT / "tests/fixtures/health/real_smoke/metrics.jsonl", run_dir / "metrics.jsonl")
        spec = RunSpec.from_file(spec_path)
        store.insert_run(
            Run(
                id=run_id,
                name=spec.name,
                spec_yaml=spec.to_yaml(),
                backend=spec.backend.kind,
                status=RunStatus.QUEUED.value,
                created_at=NOW,
                run_dir=str(run_dir),
            )
        )
        ingest_file(store, run_id, run_dir / "metrics.jsonl")
        names[run_id] = run_id
    conn = sqlite3.connect(store.path)  # creation time is the import's clock; pin it so the table is stable
    with conn:
        conn.execute("UPDATE runs SET created_at = ?", (NOW - 3600,))
        for col in ("started_at", "ended_at", "last_time"):  # the clock's, where a log had no times
            conn.execute(f"UPDATE runs SET {col} = ? WHERE {col} >= ?", (NOW - 1800, began - 1))
    conn.close()
    out: dict[str, object] = {"refused": {k: v for k, v in names.items() if k.startswith("refused:")}}
    runs = {}
    option_sets = {"default": ChartOptions(), "log_wall": ChartOptions(smoothing=0.0, log_y=True, xaxis="wall")}
    for run in store.list_runs():
        key = names[run.id]
        run = store.get_run(run.id)
        found = overview.findings(store, run)
        plots = {
            label: chart_json.run_plots(store, run.id, opts, findings=found) for label, opts in option_sets.items()
        }
        records = store.records(run.id)
        runs[key] = {
            "plots": plots,
            "findings": [f.to_dict() for f in found],
            "badge": overview.health_badge(store, run),
            "report": overview.findings_markdown(store, run),
            "status": overview.status_markdown(run, now=NOW),
            "settings": overview.spec_settings(run),
            "command": overview.command_text(run.spec_yaml),
            "diagnose": [f.to_dict() for f in diagnose(records)],
        }
    out["runs"] = runs
    frame = overview.runs_frame(store, now=NOW)
    frame["id"] = frame["id"].map(names)
    out["runs_table"] = json.loads(frame.to_json(orient="records"))
    text = json.dumps(out, sort_keys=True, indent=1, default=str)
    for run_id, name in names.items():
        text = text.replace(run_id, name)
    return text


def main(argv: list[str] | None = None) -> int:
    """Write the snapshot of the given log folders to `-o`."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="*", type=Path)
    ap.add_argument("-o", "--output", type=Path, required=True)
    args = ap.parse_args(argv)
    shared = next(
        (p / "shared/realdata/grpo_logs" for p in ROOT.parents if (p / "shared/realdata").is_dir()),
        ROOT.parent / "shared/realdata/grpo_logs",
    )  # beside the checkout, or above a worktree of it
    dirs = args.dirs or [ROOT / "tests/fixtures/real_logs", shared]
    os.environ["TZ"] = "UTC"
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GRPO_DASHBOARD_DATA_DIR"] = tmp
        text = snapshot([d.resolve() for d in dirs])
        text = text.replace(tmp, "<data>")
    args.output.write_text(text, encoding="utf-8")
    print(f"{args.output}: {len(text):,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
