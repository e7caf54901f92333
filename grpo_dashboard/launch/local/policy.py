"""What the local backend may do on a shared Space: its jobs would run on the Space's own machine, so only
when the Space owner enables it."""

from grpo_dashboard.launch.interface import SpacePolicy

SPACE_POLICY = SpacePolicy(on_dashboard_host=True)
