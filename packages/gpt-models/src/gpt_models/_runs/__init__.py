"""Run folders on disk: naming, recognising and loading them (``folders.py``), the resolved run its
``config.toml`` records (``resolve.py``), orbax checkpoints (``checkpoint.py``) read through stable
snapshots (``snapshot.py``) and checked by digests (``digest.py``), the run lock (``lock.py``), the run's error log (``runlog.py``), recognising a full
disk (``diskfull.py``), and Hugging Face folders in and out (``hf.py``, their tensor maps in
``hf_maps.py``, the imported run folder in ``hf_run.py``).

Layer 4 of gpt_models. May import: ``.._errors``, ``.._config``, ``.._data``, ``.._distributed``,
``.._model``.
"""
