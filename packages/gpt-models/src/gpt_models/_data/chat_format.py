"""How a chat store writes a turn: its template, the template's variables, the end of a reply.

``gpt prepare`` records this in a chat store's manifest (``"chat_format"``), ``gpt train`` keeps
it in the run folder (``chat_format.json``, through ``_runs/resolve.py``), and ``gpt sample`` and
``gpt export`` read it there: a prompt becomes one user turn and the assistant's header, the reply
ends at the end-of-turn token, an exported folder carries the template and stops there. A run that
starts from a chat model on text or completions keeps the model's template for its exports, and
records that its data was not chat (``data``): ``gpt sample`` continues its prompts as plain text.

The end of an assistant turn is what the template writes after the content (``<|im_end|>\\n``,
`` </s>``). Its first added (special) token is the end-of-turn token: an added token is matched
whole, so the model learnt to emit exactly that id, and generation stops at it. A text without an
added token that is one token is its own end; any other (``\\n\\n``, several ordinary tokens) has
no one id to stop at: the reply is cut at that text instead, and ``note`` says so.

The plain template (``sft_encode.py``, chats without a template) is written here as Jinja, with the
end-of-text token's text in it, so that sampling and exports treat both the same way.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from .._config.schema import Config, DataConfig
from .._errors import DataError
from .chat_template import CONTENT_MARK, ChatTemplate, compile_template
from .encoder import Encoder
from .manifest import MANIFEST
from .store import is_store, read_manifest, write_json_atomic

PLAIN = "the plain template"
FIELD = "chat_format"  # the manifest's key
# Chats whose text shows what a template writes after an assistant's content; the second for
# templates that want a system message first.
_PROBES = (
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": CONTENT_MARK}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": CONTENT_MARK}],
)  # fmt: skip
DATA_KINDS = ("chat", "text", "completion", "")
_FIELDS = {"template": str, "template_file": str, "variables": dict, "tail": str,
           "end_of_turn_text": str, "end_of_turn_ids": list, "note": str}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class ChatFormat:
    """A chat template as a run uses it (see the module docstring).

    ``template`` is Jinja (the plain template's too), rendered with ``variables`` (the special
    tokens' text); ``template_file`` is where ``gpt prepare`` read it (or :data:`PLAIN`);
    ``tail`` is the text the template writes after an assistant's content; ``end_of_turn_text``
    its end, with ``end_of_turn_ids`` (empty: no one id, for the reason in ``note``);
    ``kept_in`` names the file this was read from, for messages. ``data`` is what the run kept
    it for: ``"chat"`` (trained on chats, or a chat model imported), or the data of a run that
    kept the template of a chat model it started from only for its exports (``"text"``,
    ``"completion"``); "" in records written before runs said which.
    """

    template: str
    variables: dict[str, Any]
    template_file: str
    tail: str
    end_of_turn_text: str
    end_of_turn_ids: tuple[int, ...]
    note: str = ""
    kept_in: str = ""
    data: str = "chat"

    def to_json(self) -> dict[str, Any]:
        """The record a manifest and a run's ``chat_format.json`` hold."""
        out = {k: getattr(self, k) for k in _FIELDS}
        return out | {"end_of_turn_ids": list(self.end_of_turn_ids), "data": self.data}

    @classmethod
    def from_json(cls, raw: Any, kept_in: str) -> ChatFormat:
        """The format a record describes; ``kept_in`` names the file it came from.

        Raises:
            DataError: the record is damaged (a field missing or of the wrong type).
        """
        if problems := format_problems(raw):
            raise DataError(
                f"{kept_in} records the chat template of a run's data, but its "
                f"{FIELD} is damaged ({'; '.join(problems)}). Restore the file from a copy, or "
                "prepare the store again and take its chat_format from its manifest.json."
            )
        values = {k: raw[k] for k in _FIELDS}
        values["end_of_turn_ids"] = tuple(raw["end_of_turn_ids"])
        return cls(**values, kept_in=kept_in, data=raw.get("data", ""))

    def prompt(self, text: str) -> str:
        """``text`` as one user turn and the header of the assistant's reply.

        The template's generation prompt (``add_generation_prompt``); for a template that has
        none, what the template writes before an assistant's content, as in training.

        Raises:
            DataError: the template cannot be compiled or raises for one user turn.
        """
        return self.conversation([{"role": "user", "content": text}])

    def conversation(self, messages: list[dict[str, str]]) -> str:
        """``messages`` (``role``, ``content``) written by the template, then the header of the
        assistant's reply (as :meth:`prompt` writes one user turn).

        Raises:
            DataError: the template cannot be compiled or raises for these messages.
        """
        user = list(messages)
        try:
            compiled = compile_template(self.template, Path(self.kept_in))
        except DataError as err:  # its message is prepare's; Jinja's own says what is wrong
            raise self._unusable(f"{type(err.__cause__).__name__}: {err.__cause__}") from err
        template = ChatTemplate(Path(self.template_file), self.template, self.variables, compiled)
        try:
            asked = template.text(user, add_generation_prompt=True)
            if asked != template.text(user):
                return asked
            marked = template.text([*user, {"role": "assistant", "content": CONTENT_MARK}])
        except Exception as err:  # Jinja's errors, and whatever the template's code raises
            raise self._unusable(f"{type(err).__name__}: {err}") from err
        if CONTENT_MARK not in marked:
            raise self._unusable("it leaves an assistant's content out")
        return marked[: marked.index(CONTENT_MARK)]

    def reply(self, text: str, ended: bool) -> tuple[str, bool]:
        """The reply in ``text`` (decoded up to, not with, the end-of-turn id when ``ended``), and
        whether it ended: the tail's text before the end-of-turn token is dropped; without an
        end-of-turn id the text is cut where the end-of-turn text begins."""
        if ended:
            end = self.tail.find(self.end_of_turn_text) if self.end_of_turn_text else -1
            lead = self.tail[:end] if end > 0 else ""  # `` </s>``: the space is the template's
            return text.removesuffix(lead) if lead else text, True
        if not self.end_of_turn_ids and self.end_of_turn_text and self.end_of_turn_text in text:
            return text.partition(self.end_of_turn_text)[0], True
        return text, False

    def _unusable(self, why: str) -> DataError:
        return DataError(
            f"The chat template this run was trained with (from {self.template_file}, kept in "
            f"{self.kept_in}) cannot write the prompt as a user turn ({why}), so the prompt "
            "cannot be given as the run learnt to read one. Sample with --raw to continue the "
            f"prompt as plain text, or fix the template in {self.kept_in}."
        )


def format_problems(raw: Any) -> list[str]:
    """What is wrong with a chat-format record ([]: nothing)."""
    if not isinstance(raw, dict):
        return [f"it is {type(raw).__name__}, expected an object"]
    problems = [
        f"{k} is {type(raw.get(k)).__name__}, expected {t.__name__}"
        for k, t in _FIELDS.items()
        if not isinstance(raw.get(k), t)
    ]
    ids = raw.get("end_of_turn_ids")
    if isinstance(ids, list) and not all(isinstance(i, int) and i >= 0 for i in ids):
        problems.append(f"end_of_turn_ids = {ids!r} are not token ids")
    if raw.get("data", "chat") not in DATA_KINDS:
        problems.append(f"data = {raw['data']!r}, expected one of {', '.join(DATA_KINDS)}")
    return problems


def trained_on(data: DataConfig) -> str:
    """What a run's data holds: ``"chat"`` or ``"completion"`` examples (a token store's manifest
    says), else ``"text"``."""
    store = Path(data.path)
    if data.kind == "store" and is_store(store):
        return str(read_manifest(store).get("kind") or "text")
    return "text"


def sampling_format(chat: ChatFormat | None, cfg: Config) -> ChatFormat | None:
    """The chat format ``gpt sample`` writes a prompt with: the run's kept ``chat`` where it
    learnt chats; None (the prompt continued as plain text, as its data was written) where the
    run kept a chat model's template for its exports alone, having trained on text or
    completions.

    A record without ``data`` (written before runs kept it) is asked of the run: only a run
    started from another model (``init.source``) can have kept a template its data did not
    have; then its data says, where it is still there (a store that is gone: as chat, as before).
    """
    if chat is None or chat.data == "chat":
        return chat
    if chat.data or not cfg.init.source:
        return None if chat.data else chat
    store = Path(cfg.data.path)
    if cfg.data.kind == "store" and not is_store(store):
        return chat
    return chat if trained_on(cfg.data) == "chat" else None


def chat_format_of(enc: Encoder, template: ChatTemplate | None) -> ChatFormat:
    """The format ``gpt prepare`` renders chats with: ``template``, or the plain template."""
    if template is None:
        eot = enc.eot_text
        return ChatFormat(plain_template(eot), {}, PLAIN, eot, eot, (enc.eot_id,))
    source, variables, file = template.source, template.variables, str(template.file.absolute())
    marked = ""
    for probe in _PROBES:
        try:
            marked = template.text(probe)
            break
        except Exception as err:  # Jinja's errors, and whatever the template's code raises
            why = (
                f"it refuses a chat of a user and an assistant turn, with or without a "
                f"system message first ({type(err).__name__}: {err})"
            )
    else:
        return ChatFormat(source, variables, file, "", "", (), _no_end(why))
    tail = marked.partition(CONTENT_MARK)[2]
    text, ids, why = _end_of_turn(enc, tail)
    return ChatFormat(source, variables, file, tail, text, ids, _no_end(why) if why else "")


def _end_of_turn(enc: Encoder, tail: str) -> tuple[str, tuple[int, ...], str]:
    """The end-of-turn text and id in ``tail``, or the reason there is no one id."""
    if not tail.strip():
        return tail, (), f"it writes {tail!r} after an assistant's content, nothing to end a turn"
    assert enc.tok is not None and enc.json is not None  # a template comes with a tokenizer.json
    ids = enc.tok.encode(tail, add_special_tokens=False).ids
    added = {t.get("id") for t in json.loads(enc.json).get("added_tokens") or []}
    for i in ids:
        if i in added:
            return str(enc.tok.id_to_token(i)), (i,), ""
    if len(ids) == 1:
        return tail, (ids[0],), ""
    shown = tail.strip()
    return (
        shown,
        (),
        (
            f"it ends an assistant turn with {tail!r}, {len(ids)} tokens and none of them an added "
            f"(special) token; a reply is cut where {shown!r} begins"
        ),
    )


def _no_end(why: str) -> str:
    return (
        f"No token ends an assistant turn: {why}. gpt sample then runs to --max-new-tokens, and "
        "an export's generate stops only at the end-of-text token. A template that ends each "
        "assistant turn with a special token (<|im_end|>, </s>) gives one."
    )


def plain_template(eot: str) -> str:
    """The plain template (``sft_encode.py``) as Jinja, its end-of-text text written in.

    Example:
        >>> t = plain_template("<|endoftext|>")
        >>> "<|assistant|>" in t and "<|endoftext|>" in t
        True
    """
    # A Jinja string literal takes JSON's escapes (\\n, \\u0000, \\"); a raw NUL would not survive
    # a JSON file's round trip as readably.
    end = json.dumps(eot, ensure_ascii=False)
    return (
        "{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + message['content'] }}"
        "{% if message['role'] == 'assistant' %}{{ " + end + " }}{% else %}{{ '\\n' }}{% endif %}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
    )


def manifest_chat_format(manifest: dict[str, Any], store: Path) -> ChatFormat:
    """The chat format a chat store's manifest records.

    Raises:
        DataError: the store was prepared before manifests recorded it, or the record is damaged.
    """
    if FIELD not in manifest:
        raise DataError(
            f"The chat store {store} was prepared by a gpt prepare that did not yet record its "
            f"chat template in {MANIFEST}, so a prompt cannot be written as a user turn the way "
            "the run was trained, nor the reply stopped at the end of its turn. Re-run the same "
            "gpt prepare command: it adds the template to the manifest and leaves the shards as "
            "they are. Or sample with gpt sample --raw (the prompt as plain text)."
        )
    return ChatFormat.from_json(manifest[FIELD], str(store / MANIFEST))


def add_chat_format(
    store: Path, manifest: dict[str, Any], template: ChatTemplate | None
) -> dict[str, Any]:
    """A chat store's manifest from before manifests recorded the chat format, with it added
    (``gpt prepare`` run again with the same inputs and settings).

    The settings matched, so ``template`` is the one its chats were rendered with; the store's
    own tokenizer file (or bytes) gives the end-of-turn id. Only the manifest is rewritten.
    """
    from tokenizers import Tokenizer

    file = manifest["tokenizer"]["file"]
    enc = (
        Encoder("byte")
        if file is None
        else Encoder("bpe", Tokenizer.from_str((store / file).read_text(encoding="utf-8")))
    )
    manifest = {**manifest, FIELD: chat_format_of(enc, template).to_json()}
    write_json_atomic(store / MANIFEST, manifest)
    return manifest


def read_chat_format(path: Path) -> ChatFormat:
    """The chat format kept in a run's ``chat_format.json``.

    Raises:
        DataError: the file is not JSON or its record is damaged.
    """
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(
            f"{path} (the chat template the run was trained with) is not valid JSON ({err}). "
            "Restore it from a copy (the store's manifest.json holds the same record as "
            "chat_format), or sample with --raw."
        ) from err
    return ChatFormat.from_json(raw, str(path))
