"""The ``gpt`` command line: the parser and exit statuses (``main.py``) and what each command does
(``commands.py``, one ``*_command`` function per command; the longer ones in their own modules:
training wired from a resolved run, its plan and hooks, also as the library's ``train`` and
``plan_training`` (``train.py``), ``gpt train``'s flags (``train_flags.py``), the run a reading
command names (``run_args.py``), ``gpt eval --text/--task`` in ``eval_report.py``, ``gpt eval
--lm-eval`` in ``lm_eval.py``, ``gpt import``/``export`` in ``hf.py``, ``gpt prepare`` in
``prepare.py``, ``gpt serve`` in ``serve.py``), the refusal of empty path, name and address
arguments every command shares (``empty_values.py``), its stderr without orbax's late reports
after a failed save or restore (``quiet_stderr.py``), a third-party library's own output
(lm-eval's) sent to a log of the run instead of the terminal (``third_party_log.py``), and what
the ``gpt`` program does before its command: the CPU restart and the first Ctrl-C
(``launcher.py``).

Layer 7 of gpt_models, the top: may import every other layer.
"""
