"""The GPT itself: the blox modules, params, loss and FLOPs (``gpt.py``); sampling and generation
with or without a KV cache (``generate.py``); which attention cores this backend can run
(``attention.py``).

Layer 3 of gpt_models. May import: ``.._errors``, ``.._config``, ``.._data``, ``.._distributed``.
"""
