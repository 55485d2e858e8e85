"""Training: the state, optimizer and jitted steps (``step.py``, ``muon.py``), the loop that runs
them in a run folder (``loop.py``, its steps in ``step_loop.py``) once its launch is checked
(``launch.py``), starting from other weights (``init_from.py``), evaluation and
samples of trained params (``evaluate.py``; windows scored by ``scoring.py`` for whole texts in
``text_eval.py`` and JSONL tasks in ``tasks.py``; lm-evaluation-harness tasks in ``lm_eval.py``,
its ``gpt-models`` model type in ``lm_eval_model.py``), the memory pre-flight of every
command (``preflight.py``; the program each command compiles for it: ``plans.py``), metrics (``logging.py``,
``metrics_csv.py``, a data mixture's per-source ``source_metrics.py``), progress and MFU (``progress.py``, ``mfu.py``), the step-time split and
``--profile`` (``profiling.py``), signals (``signals.py``) and the host allocator
(``host_memory.py``).

Layer 5 of gpt_models. May import every layer below: ``.._errors``, ``.._console``, ``.._config``,
``.._data``, ``.._distributed``, ``.._model``, ``.._runs``.
"""
