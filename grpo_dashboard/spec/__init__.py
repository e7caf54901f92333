"""The run spec: its dataclasses, TRL's fields, presets, the form model, safe YAML, the job's files."""
