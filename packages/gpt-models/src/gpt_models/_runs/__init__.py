"""Run folders on disk: naming, recognising and loading them (``folders.py``), orbax checkpoints
(``checkpoint.py``) read through stable snapshots (``snapshot.py``), the run lock (``lock.py``), and
recognising a full disk (``diskfull.py``).

Layer 4 of gpt_models. May import: ``.._errors``, ``.._config``, ``.._data``, ``.._distributed``,
``.._model``.
"""
