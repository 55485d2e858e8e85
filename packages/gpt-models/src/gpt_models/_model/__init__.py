"""The GPT itself: the blox modules and params (``gpt.py``), its transformer block and what its
layers share (``block.py``); the training FLOPs per token of a full or LoRA run (``flops.py``); the
next-token loss of plain and packed batches (``loss.py``); sampling and generation with or without
a KV cache (``generate.py``); which attention cores this backend can run (``attention.py``); the
Hugging Face families in its terms, config.json and tensors (``hf_layout.py`` for what they share,
``hf_gpt2.py``, ``hf_llama.py`` with the Llama-like layout, ``hf_dense.py`` for Qwen2, Qwen3,
Mistral and OLMo 2, ``hf_gemma.py`` for Gemma 2 and 3, ``hf_moe.py`` for Mixtral and Qwen3-MoE,
``hf_families.py``, the registry that picks one); the model section of a run with LoRA adapters
and its ``bx.LoRA`` (``lora.py``); the preference losses and TRL's reward metrics on packed pairs
(``preference.py``).

Layer 3 of gpt_models. May import: ``.._errors``, ``.._config``, ``.._data``, ``.._distributed``.
"""
