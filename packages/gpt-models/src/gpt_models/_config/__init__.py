"""Configs: the dataclasses and presets (``schema.py``), TOML files and ``--set`` overrides (``toml.py``).

Layer 1 of gpt_models. May import: ``.._errors``. Nothing else in gpt_models.
"""
