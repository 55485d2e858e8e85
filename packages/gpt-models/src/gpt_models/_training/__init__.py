"""Training a resolved run: the state, optimizer and jitted step (``step.py``, ``muon.py``), the
plan of a run (``plans.py``: its checks, mesh, optimizer and the compiled step, measured), the
loop that trains it in its run folder (``loop.py``, its steps in ``step_loop.py``) with the hooks
a command attaches (``hooks.py``), starting from other weights (``init_from.py``), metrics
(``logging.py``, ``metrics_csv.py``, a data mixture's per-source ``source_metrics.py``, a
mixture of experts' ``moe_metrics.py``), progress
and MFU (``progress.py``, ``mfu.py``), the step-time split and ``--profile`` (``profiling.py``),
signals (``signals.py``), and a preference run's objective (``preference_step.py``) and reference,
ready before its first step (``preference.py``).

Layer 6 of gpt_models, beside ``_inference``, which it never imports: evaluation and sampling
reach the loop as hooks. May import every layer below: ``.._errors``, ``.._console``,
``.._config``, ``.._data``, ``.._distributed``, ``.._model``, ``.._runs``, ``.._compute``.
"""
