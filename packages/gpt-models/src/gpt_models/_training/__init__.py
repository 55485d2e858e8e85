"""Training: the state, optimizer and jitted steps (``step.py``, ``muon.py``), the loop that runs
them in a run folder (``loop.py``), evaluation and samples of trained params (``evaluate.py``),
metrics (``logging.py``, ``metrics_csv.py``), progress and MFU (``progress.py``, ``mfu.py``),
signals (``signals.py``) and the host allocator (``host_memory.py``).

Layer 5 of gpt_models. May import every layer below: ``.._errors``, ``.._config``, ``.._data``,
``.._distributed``, ``.._model``, ``.._runs``.
"""
