"""Run folders on disk and the run they hold: a run resolved once into one value (``run.py``:
``Run`` and ``resolve_run``), what a run reads, resolved and recorded in its config.toml
(``resolve.py``), the weights it starts from (``init_source.py``), the chat format it keeps
(``chat_file.py``), whether a launch can start in its folder and what becomes of its records
(``launch.py``), naming, recognising and loading run folders (``folders.py``), orbax checkpoints
(``checkpoint.py``) read through stable snapshots (``snapshot.py``), checked by digests
(``digest.py``) and with a failed restore's reads wound down (``abandoned_reads.py``), the run
lock (``lock.py``), the run's error log (``runlog.py``), recognising a full disk
(``diskfull.py``), and Hugging Face folders: checked whole where they enter (``hf_folder.py``),
read as params or as ``gpt import``'s run (``hf_import.py``), written (``hf_export.py``), and a LoRA
run's adapters written as a PEFT adapter folder (``adapter_export.py``); a preference run's
checks and reference weights (``preference_run.py``); the
families' mappings live beside the model, in ``_model/hf_*.py``.

Layer 4 of gpt_models. May import: ``.._errors``, ``.._config``, ``.._data``, ``.._distributed``,
``.._model``.
"""
