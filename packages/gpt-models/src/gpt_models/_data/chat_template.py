"""A tokenizer's chat template, rendered as transformers' ``apply_chat_template`` renders it.

The template is the ``chat_template`` of the ``tokenizer_config.json`` beside the ``tokenizer.json``
given to ``gpt prepare --tokenizer`` (or a ``chat_template.jinja`` file there, the form newer
Hugging Face folders keep it in). It is Jinja run the way transformers runs it, so that the text,
and so the token ids, are the same: a sandboxed environment whose values the template cannot
mutate, ``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols`` extension, a ``tojson`` filter
that keeps non-ASCII text and takes ``indent``/``separators``/``sort_keys``, the globals
``raise_exception`` and ``strftime_now``, the config's special tokens (``bos_token``,
``eos_token``, ...) as variables, ``tools`` and ``documents`` None and ``add_generation_prompt``
false. A ``{% generation %}`` block (transformers' marker of assistant text) renders its body.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from .._errors import DataError

CONFIG = "tokenizer_config.json"
# What stands for an assistant's content to find the text a template puts around it; no
# whitespace, so that a template's trim leaves it whole.
CONTENT_MARK = "\x00\x01counted-content\x01\x00"
JINJA_FILE = "chat_template.jinja"
_SPECIAL = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


@dataclasses.dataclass(frozen=True)
class ChatTemplate:
    """A compiled chat template: where it came from, its source, and the variables it is given."""

    file: Path
    source: str
    variables: dict[str, Any]
    compiled: Any

    def fingerprint(self) -> str:
        """The sha256 of the template and its variables: what a store's settings record."""
        import hashlib

        blob = json.dumps([self.source, self.variables], sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()

    def text(self, messages: list[dict[str, str]], *, add_generation_prompt: bool = False) -> str:
        """The template's text for ``messages``; raises whatever the template raises."""
        return str(
            self.compiled.render(
                messages=messages,
                tools=None,
                documents=None,
                add_generation_prompt=add_generation_prompt,
                **self.variables,
            )
        )

    def render(self, messages: list[dict[str, str]], where: str) -> str:
        """The text of ``messages`` (``add_generation_prompt`` false).

        Raises:
            DataError: the template raised (its ``raise_exception``, an undefined name, a type
                error), naming the template's file, the line ``where`` and Jinja's message.
        """
        try:
            return self.text(messages)
        except (
            Exception
        ) as err:  # Jinja raises TemplateError subclasses, and whatever the code does
            raise DataError(
                f"The chat template in {self.file} failed to render the conversation of {where} "
                f"({type(err).__name__}: {err}). The template refuses these messages (e.g. roles "
                "out of the order it expects) or is broken: fix the line or the template, or "
                f"move {self.file.name} away to use the plain template "
                f"(docs/gpt-models/fine-tuning.md)."
            ) from err


def find_chat_template(tokenizer_json: Path) -> ChatTemplate | None:
    """The chat template beside ``tokenizer_json`` (None: there is none).

    Raises:
        DataError: the config is not a JSON object, its ``chat_template`` is not text, or the
            template is not valid Jinja (with the line Jinja names).
    """
    folder = tokenizer_json.parent
    config_path = folder / CONFIG
    config: Any = {}
    if config_path.is_file():
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise DataError(
                f"{config_path} (beside --tokenizer {tokenizer_json}) is not valid JSON ({err}). "
                "Restore it from the model's folder, or move it away to use the plain template."
            ) from err
        if not isinstance(config, dict):
            raise DataError(
                f"{config_path} (beside --tokenizer {tokenizer_json}) holds "
                f"{type(config).__name__}, expected a JSON object (a tokenizer config). Restore "
                "it from the model's folder, or move it away to use the plain template."
            )
    source, file = config.get("chat_template"), config_path
    if (folder / JINJA_FILE).is_file():
        source, file = (folder / JINJA_FILE).read_text(encoding="utf-8"), folder / JINJA_FILE
    if isinstance(source, list):  # named templates: [{"name": "default", "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in source if isinstance(t, dict)}
        source = named.get("default")
    if source is None:
        return None
    if not isinstance(source, str):
        raise DataError(
            f"{file}: chat_template is {type(source).__name__}, expected the template's text (a "
            'string, or a list of {"name", "template"} with a "default").'
        )
    return ChatTemplate(file, source, _variables(config), compile_template(source, file))


def _variables(config: dict[str, Any]) -> dict[str, Any]:
    """The special tokens as the template sees them: their text (a config may write one as an
    object with its ``content``), the ones the config leaves out undefined."""
    out: dict[str, Any] = {}
    for name in _SPECIAL:
        value = config.get(name)
        value = value.get("content") if isinstance(value, dict) else value
        if isinstance(value, str):
            out[name] = value
    extra = config.get("additional_special_tokens")
    if isinstance(extra, list):
        out["additional_special_tokens"] = [
            t.get("content") if isinstance(t, dict) else t for t in extra
        ]
    return out


def compile_template(source: str, file: Path) -> Any:
    """``source`` compiled as transformers compiles a chat template (see the module docstring).

    Raises:
        DataError: not valid Jinja, naming ``file`` and the line.
    """
    from jinja2 import TemplateError, TemplateSyntaxError, nodes
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """``{% generation %}...{% endgeneration %}``: the body, as it is."""

        tags = frozenset({"generation"})  # type: ignore[assignment]

        def parse(self, parser: Any) -> list[nodes.Node]:
            next(parser.stream)
            return list(parser.parse_statements(("name:endgeneration",), drop_needle=True))

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def tojson(
        value: Any,
        ensure_ascii: bool = False,
        indent: Any = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        # Jinja's own tojson escapes <, > and & for HTML, which would change the text
        return json.dumps(
            value,
            ensure_ascii=ensure_ascii,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, "jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(source)
    except TemplateSyntaxError as err:
        raise DataError(
            f"The chat template in {file} is not valid Jinja (line {err.lineno}: {err.message}). "
            "Fix the template, or move the file away to use the plain template."
        ) from err
