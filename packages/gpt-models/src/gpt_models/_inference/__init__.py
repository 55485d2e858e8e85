"""Using trained params: the validation loss on fixed windows (``evaluate.py``, its jitted step
``eval_step.py``), text from a prompt (``sampling.py``), whole texts scored by sliding windows
(``text_eval.py``) and JSONL tasks (``tasks.py``), both through ``scoring.py``,
lm-evaluation-harness
tasks (``lm_eval.py``, its ``gpt-models`` model type in ``lm_eval_model.py``), and the programs
``gpt sample`` and ``gpt eval`` compile for their pre-flight (``plans.py``).

Layer 6 of gpt_models, beside ``_training``, which it never imports (nor does ``_training`` import
it: the command hands evaluation and sampling to the training loop as hooks). May import every
layer below: ``.._errors``, ``.._console``, ``.._config``, ``.._data``, ``.._distributed``,
``.._model``, ``.._runs``, ``.._compute``.
"""
