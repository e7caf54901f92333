"""Watch a run started anywhere: `DashboardCallback` for a user's own TRL script.

Importing this package needs only what a TRL job has (transformers, numpy, PyYAML): no gradio, nothing of the
dashboard's UI.
"""

from grpo_dashboard.integrations.callback import DashboardCallback

__all__ = ["DashboardCallback"]
