"""GRPO Dashboard: configure, launch and watch TRL GRPO training runs."""

__version__ = "0.1.0"
