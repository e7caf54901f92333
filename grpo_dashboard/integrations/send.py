"""`python -m grpo_dashboard.integrations.send SPOOL_DIR URL [--token T]`: send what a run's spool still holds
(the dashboard was down when the script ended); each line arrives once, whatever was sent before."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from grpo_dashboard.integrations.http import Sender


def main(argv: list[str] | None = None) -> int:
    """Send the spool and say whether everything arrived."""
    p = argparse.ArgumentParser(prog="python -m grpo_dashboard.integrations.send")
    p.add_argument("spool")
    p.add_argument("url")
    p.add_argument("--token", default=os.environ.get("HF_TOKEN"), help="your Hugging Face token (default: $HF_TOKEN)")
    p.add_argument("--wait", type=float, default=60.0, help="seconds to keep trying")
    args = p.parse_args(argv)
    spool = Path(args.spool)
    if not (spool / "run.yaml").is_file():
        print(f"{spool} is not a run's spool directory (no run.yaml).", file=sys.stderr)
        return 2
    sender = Sender(spool, args.url, spool.name, args.token).start()
    done = sender.close(args.wait)
    print(f"{'sent' if done else 'not all sent'}: {sender.sent}")
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main())
