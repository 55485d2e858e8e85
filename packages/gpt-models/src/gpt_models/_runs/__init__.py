"""Run folders on disk: what a run reads, resolved once and recorded in its config.toml
(``resolve.py``), naming, recognising and loading them (``folders.py``), orbax checkpoints
(``checkpoint.py``) read through stable snapshots (``snapshot.py``), checked by digests
(``digest.py``) and with a failed restore's reads wound down (``abandoned_reads.py``), the run
lock (``lock.py``), the run's error log (``runlog.py``), recognising a full disk
(``diskfull.py``), and Hugging Face folders: checked whole where they enter (``hf_folder.py``),
read as params or as ``gpt import``'s run (``hf_import.py``), written (``hf_export.py``), and a LoRA
run's adapters written as a PEFT adapter folder (``adapter_export.py``); the
families' mappings live beside the model, in ``_model/hf_*.py``.

Layer 4 of gpt_models. May import: ``.._errors``, ``.._config``, ``.._data``, ``.._distributed``,
``.._model``.
"""
