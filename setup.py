"""Package discovery (the rest of the metadata is in pyproject.toml): every package under grpo_dashboard/, found, so
a new folder (a backend's package) needs no edit here, plus the top-level jobs/ and examples/ folders installed as
grpo_dashboard/_project/{jobs,examples} (pyproject.toml's package-dir maps them; discovery cannot see them)."""

from setuptools import find_packages, setup

setup(
    packages=[
        *find_packages(include=["grpo_dashboard", "grpo_dashboard.*"]),
        "grpo_dashboard._project.jobs",
        "grpo_dashboard._project.examples",
    ]
)
