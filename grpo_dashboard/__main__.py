"""`python -m grpo_dashboard` runs the CLI."""

import sys

from .cli import main

sys.exit(main())
