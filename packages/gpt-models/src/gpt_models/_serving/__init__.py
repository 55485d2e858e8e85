"""``gpt serve``: a finished run answering over the OpenAI API.

The decoding programs, a KV cache of ``--max-batch`` slots that requests join between steps
(``decode.py``), the engine thread that runs them (``engine.py``), the requests as the API
writes them (``requests.py``), the text a sequence has produced, cut at its stop strings
(``text.py``), the ASGI app (``app.py``, starlette), the server and its drain on SIGTERM
(``server.py``, uvicorn) and the memory pre-flight of the cache (``plan.py``).

Layer 6 of gpt_models, beside ``_inference`` and ``_training``, neither of which it imports (the
command hands it the run's tokenizer, chat format and stop ids): it may import every layer below;
only ``_cli`` imports it. starlette and uvicorn (the ``gpt-models[serve]`` extra) are imported by
``app.py`` and ``server.py`` alone.
"""
