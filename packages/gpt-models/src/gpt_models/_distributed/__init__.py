"""Devices and processes: the (data, fsdp, tensor) mesh and the logical-axis rules (``mesh.py``),
multi-process bookkeeping (``processes.py``), ``jax.distributed`` start-up and lost peers
(``startup.py``).

Layer 2 of gpt_models. May import: ``.._errors``, ``.._config``.
"""
