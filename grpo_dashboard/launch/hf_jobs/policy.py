"""What the Hugging Face Jobs backend may do on a shared Space: everything (its jobs run on the user's own Hub
account, with their own token), and its namespace defaults to the signed-in user."""

from grpo_dashboard.launch.interface import SpacePolicy

SPACE_POLICY = SpacePolicy(on_dashboard_host=False, namespace_is_user=True)
