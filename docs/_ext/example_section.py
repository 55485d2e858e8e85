"""Griffe extension for the API reference (loaded by mkdocs.yml).

Our docstrings spell the Google-style section `Example:`; griffe only knows `Examples:` and renders the
singular as an admonition whose `>>>` lines become nested quotes. Reading one as the other makes
every example render as a code block, without rewording a hundred docstrings.
"""

import re
from typing import Any

import griffe

_SECTION = re.compile(r"^(\s*)Example:[ \t]*$", re.MULTILINE)


class ExampleSection(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _SECTION.sub(r"\1Examples:", obj.docstring.value)
