"""Text to token ids: the byte and BPE tokenizers (``byte_tokenizer.py``, ``bpe.py``), corpora and
batches (``corpus.py``), nanoGPT ``.bin`` files and their sidecars (``token_files.py``), and the
tokenizer a run folder uses (``run_tokenizer.py``).

Layer 2 of gpt_models. May import: ``.._errors``, ``.._config``.
"""
