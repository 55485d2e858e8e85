"""Configs: the dataclasses and presets (``schema.py``), a data mixture's sources (``sources.py``),
TOML files and ``--set`` overrides (``toml.py``).

Layer 1 of gpt_models. May import: ``.._errors``. Nothing else in gpt_models.
"""
