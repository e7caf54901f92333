"""`python -m grpo_dashboard` runs the CLI."""

import sys

from grpo_dashboard.cli import main

sys.exit(main())
