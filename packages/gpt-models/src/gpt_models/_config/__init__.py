"""Configs: the dataclasses and their checks (``schema.py``; the ``[model]`` section in
``model.py``), the presets (``presets.py``), a data
mixture's sources (``sources.py``),
the ``[lora]`` section (``lora.py``), the ``[preference]`` section (``preference.py``),
TOML files and ``--set`` overrides (``toml.py``).

Layer 1 of gpt_models. May import: ``.._errors``. Nothing else in gpt_models.
"""
