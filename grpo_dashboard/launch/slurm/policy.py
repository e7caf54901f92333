"""What the Slurm backend may do on a shared Space: its jobs would run on the cluster the Space's machine submits
to, so only when the Space owner enables it (as for local runs)."""

from grpo_dashboard.launch.interface import SpacePolicy

SPACE_POLICY = SpacePolicy(on_dashboard_host=True)
