"""Checks before launch: validation, dataset inspection, reward contract check, sandbox, hardware."""
