"""Text to token ids: the byte and BPE tokenizers (``byte_tokenizer.py``, ``bpe.py``), corpora and
batches (``corpus.py``), a data mixture's sampler (``mixture.py``), nanoGPT ``.bin`` files and
their sidecars (``token_files.py``), and the tokenizer a run folder uses (``run_tokenizer.py``);
``gpt prepare``: documents read from text, JSONL and parquet files (``sources.py``, in chunks:
``chunks.py``; chat and completion lines: ``examples.py``) tokenized resumably (``prepare.py``;
what it checks: ``prepare_checks.py``; its tokenizer: ``encoder.py``; chat templates:
``chat_template.py``; the chat format a store records and a run keeps, for sampling and export:
``chat_format.py``; examples to ids and loss masks: ``sft_encode.py``; where it may write:
``out_folder.py``; the split: ``val_split.py``) into a token store (``store.py``) described by its
checked manifest (``manifest.py``, written by ``store_manifest.py``); a store's loss-mask and
origin streams (``sft_store.py``) and their packed batches (``packing.py``); preference lines
(``preference.py``), whose pairs pack together, and mixtures of preference stores
(``preference_mixture.py``).

Layer 2 of gpt_models. May import: ``.._errors``, ``.._console``, ``.._config``.
"""
