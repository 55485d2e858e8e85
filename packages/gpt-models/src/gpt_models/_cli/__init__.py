"""The ``gpt`` command line: the parser and exit statuses (``main.py``) and what each command does
(``commands.py``, one ``*_command`` function per command).

Layer 6 of gpt_models, the top: may import every other layer.
"""
