"""What a command compiles and whether it fits: the memory pre-flight every command runs before it
reads a checkpoint or writes a file (``preflight.py``: budgets, a compiled program's memory, the
refusal with settings that fit), the pieces its programs are planned with (``programs.py``:
compiling with a progress line, sizes, the batch a step takes, a one-device program sized by a
knob), and the host allocator that keeps a step's scratch memory between steps (``host_memory.py``).

Layer 5 of gpt_models. May import: ``.._errors``, ``.._console``, ``.._config``, ``.._data``,
``.._distributed``, ``.._model``, ``.._runs``.
"""
