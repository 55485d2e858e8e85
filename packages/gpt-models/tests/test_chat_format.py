"""A run trained on chat data samples and exports like a chat model.

gpt prepare records the chat template and the token that ends an assistant turn; gpt sample writes
the prompt as a user turn and prints the reply up to that token; sample.txt does the same; gpt
export carries the template and stops there (checked with transformers where it is installed: the
``interop`` nox session).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from gpt_models import main, prepare

CHATS = [
    [{"role": "user", "content": f"hi {i}"}, {"role": "assistant", "content": f"hello {i}!"}]
    for i in range(30)
]


def _chat_jsonl(path: Path, chats: list[list[dict[str, str]]] = CHATS) -> Path:
    path.write_text("".join(json.dumps({"messages": c}) + "\n" for c in chats), encoding="utf-8")
    return path


def _record(store: Path) -> dict:
    return json.loads((store / "manifest.json").read_text())["chat_format"]


def _render(template: str, messages: list[dict[str, str]], generation: bool = False, **variables):
    """``template`` rendered as transformers renders a chat template (sandboxed Jinja)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(
        messages=messages, add_generation_prompt=generation, **variables
    )


def test_prepare_records_the_template_and_the_token_that_ends_a_turn(tmp_path, chat_tokenizer,
                                                                      capsys):  # fmt: skip
    v = chat_tokenizer.vocab
    jsonl = _chat_jsonl(tmp_path / "c.jsonl")
    chatml = chat_tokenizer(chat_tokenizer.CHATML, "chatml")
    store = tmp_path / "chatml-store"
    assert main(["prepare", str(jsonl), "--out", str(store), "--tokenizer", str(chatml),
                 "--val-fraction", "0"]) == 0  # fmt: skip
    rec = _record(store)
    assert rec["template"] == chat_tokenizer.CHATML
    assert rec["template_file"] == str(chatml.parent / "tokenizer_config.json")
    assert rec["variables"] == {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    assert (rec["tail"], rec["end_of_turn_text"], rec["end_of_turn_ids"]) == (
        "<|im_end|>\n", "<|im_end|>", [v["<|im_end|>"]]
    )  # fmt: skip
    assert (
        f"Chat template: {chatml.parent / 'tokenizer_config.json'}; an assistant turn ends with "
        f"'<|im_end|>' (id {v['<|im_end|>']}), where gpt sample and exported models stop."
    ) in capsys.readouterr().out
    inst = chat_tokenizer(chat_tokenizer.INST, "inst")  # `` </s>``: the space is not the end
    rec = _record(prepare([jsonl], tmp_path / "inst-store", tokenizer=str(inst),
                          val_fraction=0.0).out)  # fmt: skip
    assert (rec["tail"], rec["end_of_turn_text"], rec["end_of_turn_ids"]) == (
        " </s>", "</s>", [v["</s>"]]
    )  # fmt: skip
    plain = chat_tokenizer(None, "plain")  # no template: the plain one, ended by end-of-text
    rec = _record(prepare([jsonl], tmp_path / "p-store", tokenizer=str(plain),
                          val_fraction=0.0).out)  # fmt: skip
    assert (rec["template_file"], rec["end_of_turn_text"], rec["end_of_turn_ids"]) == (
        "the plain template", "</s>", [v["</s>"]]
    )  # fmt: skip
    rec = _record(prepare([jsonl], tmp_path / "b-store", val_fraction=0.0).out)
    assert (rec["end_of_turn_text"], rec["end_of_turn_ids"], rec["note"]) == ("\0", [0], "")


def test_a_turn_that_ends_in_ordinary_tokens_has_no_end_id_and_prepare_says_why(
    tmp_path, chat_tokenizer, capsys
):
    template = (
        "{% for m in messages %}{{ m['role'] + '\\n' + m['content'] + '\\nbye\\n' }}{% endfor %}"
    )
    tok = chat_tokenizer(template, "bye")
    store = tmp_path / "store"
    assert main(["prepare", str(_chat_jsonl(tmp_path / "c.jsonl")), "--out", str(store),
                 "--tokenizer", str(tok), "--val-fraction", "0"]) == 0  # fmt: skip
    rec = _record(store)
    assert (rec["end_of_turn_text"], rec["end_of_turn_ids"]) == ("bye", [])
    note = (
        "note: No token ends an assistant turn: it ends an assistant turn with '\\nbye\\n', 3 "
        "tokens and none of them an added (special) token; a reply is cut where 'bye' begins. "
        "gpt sample then runs to --max-new-tokens, and an export's generate stops only at the "
        "end-of-text token. A template that ends each assistant turn with a special token "
        "(<|im_end|>, </s>) gives one."
    )
    assert note in capsys.readouterr().err


def test_the_plain_template_is_recorded_as_jinja_that_renders_the_stored_ids(tmp_path):
    """Rendered as transformers would render it, the recorded plain template gives exactly the
    bytes gpt prepare stored for each chat; with a generation prompt, the assistant's header."""
    chats = [[{"role": "system", "content": "be brief"}, *c] for c in CHATS[:5]]
    r = prepare([_chat_jsonl(tmp_path / "c.jsonl", chats)], tmp_path / "s", val_fraction=0.0)
    m, rec = r.manifest, _record(r.out)
    ids = np.fromfile(r.out / m["shards"]["train"][0]["file"], m["dtype"])
    rendered = "".join(_render(rec["template"], c) for c in chats).encode()
    assert ids.tolist() == list(rendered)
    assert _render(rec["template"], [{"role": "user", "content": "hi"}], generation=True) == (
        "<|user|>\nhi\n<|assistant|>\n"
    )


def test_prepare_run_again_adds_the_record_to_a_chat_store_that_lacks_it(tmp_path, capsys):
    """A chat store prepared before stores recorded their chat format gets it, shards untouched."""
    jsonl = _chat_jsonl(tmp_path / "c.jsonl")
    store = tmp_path / "store"
    assert main(["prepare", str(jsonl), "--out", str(store), "--val-fraction", "0.2"]) == 0
    manifest = json.loads((store / "manifest.json").read_text())
    record = manifest.pop("chat_format")
    (store / "manifest.json").write_text(json.dumps(manifest))
    shards = {p.name: p.read_bytes() for p in store.glob("*.bin")}
    capsys.readouterr()
    assert main(["prepare", str(jsonl), "--out", str(store), "--val-fraction", "0.2"]) == 0
    assert "is up to date" in capsys.readouterr().out
    assert _record(store) == record
    assert {p.name: p.read_bytes() for p in store.glob("*.bin")} == shards


def _sample(capsys, run: Path, *flags: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["sample", "--run", str(run), "--temperature", "0", *flags])
    out, err = capsys.readouterr()
    return code, out.removesuffix("\n"), err


def _copy(run: Path, tmp_path: Path) -> Path:
    shutil.copytree(run, tmp_path / "run")
    return tmp_path / "run"


def _end_turn_at(run: Path, token: str, token_id: int) -> None:
    """Make ``token`` the end of an assistant turn in the run's kept chat format (a file the run
    folder keeps as JSON, as a user could edit it)."""
    path = run / "chat_format.json"
    rec = json.loads(path.read_text())
    rec.update(tail=token, end_of_turn_text=token, end_of_turn_ids=[token_id])
    path.write_text(json.dumps(rec))


def _greedy(capsys, chat_run, run: Path, prompt: str) -> list[str]:
    """The tokens the run continues ``prompt`` written as a user turn with (greedy, 8 tokens)."""
    from tokenizers import Tokenizer

    wrapped = chat_run.wrap(prompt)
    code, raw, _ = _sample(capsys, run, "--raw", "--prompt", wrapped)
    assert code == 0 and raw.startswith(wrapped), raw
    tok = Tokenizer.from_file(str(run / "tokenizer.json"))
    tokens = tok.encode(raw[len(wrapped) :], add_special_tokens=False).tokens
    assert len(tokens) == 8, tokens
    return tokens


def _stop_token(tokens: list[str]) -> int:
    """The index of a token of ``tokens`` that comes after others and not before: a stop there
    is seen (the first token, if the model repeats one token only)."""
    return next((k for k in range(1, len(tokens)) if tokens[k] not in tokens[:k]), 0)


def test_gpt_sample_writes_a_user_turn_and_prints_the_reply_up_to_the_end_of_turn(
    chat_run, tmp_path, capsys
):
    from gpt_models import BPETokenizer

    run = _copy(chat_run.run, tmp_path)
    assert json.loads((run / "chat_format.json").read_text()) == _record(chat_run.store)
    tokens = _greedy(capsys, chat_run, run, "hi")
    code, reply, err = _sample(capsys, run, "--prompt", "hi")
    # the same continuation as the prompt written out by hand: cut at <|im_end|> if it came
    assert code == 0 and reply == "".join(tokens).partition("<|im_end|>")[0]
    k = _stop_token(tokens)
    _end_turn_at(
        run, tokens[k], int(BPETokenizer.load(run / "tokenizer.json").encode(tokens[k])[0])
    )
    code, reply, err = _sample(capsys, run, "--prompt", "hi")
    assert code == 0 and reply == "".join(tokens[:k])
    assert "did not end" not in err
    _end_turn_at(run, "<unk>", 0)  # a token this reply never reaches
    code, reply, err = _sample(capsys, run, "--prompt", "hi")
    assert reply == "".join(tokens)
    assert (
        "note: the reply did not end within 8 new tokens (no '<unk>', the end of an assistant "
        "turn); raise --max-new-tokens to read on." in err
    )


def test_sample_txt_of_a_chat_run_is_the_reply_gpt_sample_prints(chat_run, capsys):
    code, reply, _ = _sample(capsys, chat_run.run, "--temperature", "0.8")
    assert code == 0
    assert (chat_run.run / "sample.txt").read_text() == reply
    code, raw, _ = _sample(capsys, chat_run.run, "--temperature", "0.8", "--raw")
    assert raw.startswith("<unk> ")  # sample.prompt "The " in the run's words, then more
    assert raw != reply


def test_a_run_on_plain_text_samples_its_prompt_and_continuation_as_before(gpt_train, tmp_path,
                                                                           capsys):  # fmt: skip
    assert gpt_train() == 0
    run = tmp_path / "run"
    assert not (run / "chat_format.json").exists()
    code, text, _ = _sample(capsys, run, "--prompt", "The ")
    assert code == 0 and text.startswith("The ") and len(text) > len("The ")
    assert _sample(capsys, run, "--prompt", "The ", "--raw")[1] == text
    assert (run / "sample.txt").read_text().startswith("The ")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda rec: rec | {"template": "{{ raise_exception('roles must alternate') }}"},
            r"The chat template this run was trained with \(from \S+tokenizer_config.json, kept "
            r"in \S+/run/chat_format.json\) cannot write the prompt as a user turn "
            r"\(TemplateError: roles must alternate\), so the prompt cannot be given as the run "
            r"learnt to read one. Sample with --raw to continue the prompt as plain text, or fix "
            r"the template in \S+/run/chat_format.json.",
        ),
        (
            lambda rec: rec | {"template": "{% for %}"},
            r"The chat template .* cannot write the prompt as a user turn \(TemplateSyntaxError: "
            r"Expected an expression, got 'end of statement block'\), .*",
        ),
        (
            lambda rec: {k: v for k, v in rec.items() if k != "tail"} | {"end_of_turn_ids": ["x"]},
            r"\S+/run/chat_format.json records the chat template of a run's data, but its "
            r"chat_format is damaged \(tail is NoneType, expected str; end_of_turn_ids = \['x'\] "
            r"are not token ids\). Restore the file from a copy, or prepare the store again and "
            r"take its chat_format from its manifest.json.",
        ),
        (
            None,
            r"\S+/run/chat_format.json \(the chat template the run was trained with\) is not "
            r"valid JSON \(Expecting value: line 1 column 1 \(char 0\)\). Restore it from a copy "
            r"\(the store's manifest.json holds the same record as chat_format\), or sample with "
            r"--raw.",
        ),
    ],
)
def test_a_chat_format_that_cannot_write_the_prompt_is_one_error_and_raw_still_samples(
    chat_run, tmp_path, capsys, error_line, damage, message
):
    run = _copy(chat_run.run, tmp_path)
    path = run / "chat_format.json"
    text = "" if damage is None else json.dumps(damage(json.loads(path.read_text())))
    path.write_text(text)
    code, _, err = _sample(capsys, run, "--prompt", "hi")
    assert code == 2
    assert re.fullmatch(f"gpt: error: {message}", error_line(err)), error_line(err)
    assert _sample(capsys, run, "--prompt", "hi", "--raw")[0] == 0


def test_a_run_on_a_store_that_does_not_record_its_template_says_how_to_fix_it(
    chat_run, tmp_path, capsys, error_line
):
    """A run trained before runs kept the chat format reads its store's; a store prepared before
    stores recorded it cannot say: one error naming the fix, and --raw, export still work."""
    store = tmp_path / "store"
    shutil.copytree(chat_run.store, store)
    run = _copy(chat_run.run, tmp_path)
    (run / "chat_format.json").unlink()
    config = (run / "config.toml").read_text().replace(str(chat_run.store), str(store))
    (run / "config.toml").write_text(config)
    code, reply, _ = _sample(capsys, run, "--prompt", "hi")
    assert code == 0 and reply == _sample(capsys, chat_run.run, "--prompt", "hi")[1]
    manifest = json.loads((store / "manifest.json").read_text())
    del manifest["chat_format"]
    (store / "manifest.json").write_text(json.dumps(manifest))
    code, _, err = _sample(capsys, run, "--prompt", "hi")
    assert code == 2
    assert error_line(err) == (
        f"gpt: error: The chat store {store} was prepared by a gpt prepare that did not yet "
        "record its chat template in manifest.json, so a prompt cannot be written as a user turn "
        "the way the run was trained, nor the reply stopped at the end of its turn. Re-run the "
        "same gpt prepare command: it adds the template to the manifest and leaves the shards "
        "as they are. Or sample with gpt sample --raw (the prompt as plain text)."
    )
    assert _sample(capsys, run, "--prompt", "hi", "--raw")[0] == 0
    assert main(["export", str(run), str(tmp_path / "hf")]) == 0
    assert "note: the export carries no chat template: The chat store" in capsys.readouterr().err
    assert "chat_template" not in json.loads(
        (tmp_path / "hf" / "tokenizer_config.json").read_text()
    )


@pytest.mark.interop
def test_export_of_a_chat_run_carries_its_template_and_stops_at_the_end_of_a_turn(
    chat_run, tmp_path, capsys
):
    """The exported folder: the template and the special tokens it reads in tokenizer_config.json,
    the end-of-turn id first in eos_token_id; with transformers (where installed), the prompt of
    ``apply_chat_template`` and a ``generate`` that stops where gpt sample's reply ends."""
    from gpt_models import BPETokenizer

    run = _copy(chat_run.run, tmp_path)
    tokens = _greedy(capsys, chat_run, run, "hi")
    k = _stop_token(tokens)
    tok = BPETokenizer.load(run / "tokenizer.json")
    stop = int(tok.encode(tokens[k])[0])
    _end_turn_at(run, tokens[k], stop)
    _, reply, _ = _sample(capsys, run, "--prompt", "hi")
    out = tmp_path / "hf"
    assert main(["export", str(run), str(out)]) == 0
    assert (
        f"note: {run} was trained on chat data: {out} carries its chat template "
        "(tokenizer.apply_chat_template) and generate stops at the end of an assistant turn "
        f"({tokens[k]!r}, id {stop})."
    ) in capsys.readouterr().err
    eot = int(tok.encode("</s>")[0])
    for name in ("config.json", "generation_config.json"):
        want = stop if stop == eot else [stop, eot]
        assert json.loads((out / name).read_text())["eos_token_id"] == want, name
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["chat_template"] == _record(chat_run.store)["template"]
    assert (config["bos_token"], config["eos_token"]) == ("<s>", "</s>")
    hi = [{"role": "user", "content": "hi"}]
    variables = {k: config[k] for k in ("bos_token", "eos_token")}
    assert _render(config["chat_template"], hi, True, **variables) == chat_run.wrap("hi")

    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    ids = hf_tok.apply_chat_template(hi, add_generation_prompt=True, tokenize=True,
                                     return_dict=False)  # fmt: skip
    assert list(ids) == tok.encode(chat_run.wrap("hi")).tolist()
    model = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    x = torch.tensor([list(ids)])
    with torch.no_grad():
        got = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=8,
                             do_sample=False)[0, len(ids) :].tolist()  # fmt: skip
    assert got[-1] == stop and len(got) == k + 1, (got, tokens)
    assert hf_tok.decode(got[:-1]) == reply


SYSTEM_FIRST = (
    "{% if messages[0]['role'] != 'system' %}"
    "{{ raise_exception('a system message must come first') }}{% endif %}"
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def test_a_template_that_refuses_a_lone_user_turn_still_finishes_the_run(
    tmp_path, chat_tokenizer, small_args, capsys, error_line
):
    """It finds its end of turn from a chat with a system message; the finished run's sample.txt
    continues sample.prompt as plain text, with a note, and gpt sample says what to do."""
    v = chat_tokenizer.vocab
    tok = chat_tokenizer(SYSTEM_FIRST, "system-first")
    chats = [[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
              {"role": "assistant", "content": "hello there !"}]] * 40  # fmt: skip
    store = tmp_path / "store"
    assert main(["prepare", str(_chat_jsonl(tmp_path / "c.jsonl", chats)), "--out", str(store),
                 "--tokenizer", str(tok), "--val-fraction", "0.2"]) == 0  # fmt: skip
    assert _record(store)["end_of_turn_ids"] == [v["<|im_end|>"]]
    capsys.readouterr()
    assert main(["train", "--out", str(tmp_path), "--name", "run", *small_args,
                 "--set", f"data.path={store}", "--set", "data.tokenizer=bpe"]) == 0  # fmt: skip
    err = capsys.readouterr().err
    assert (
        "note: sample.txt continues sample.prompt as plain text: The chat template this run " in err
    )
    assert (tmp_path / "run" / "sample.txt").read_text().startswith("<unk> ")  # "The ", raw
    code, _, err = _sample(capsys, tmp_path / "run", "--prompt", "hi")
    assert code == 2
    assert (
        "cannot write the prompt as a user turn (TemplateError: a system message must come "
        "first)" in error_line(err)
    )


CHAT_END_OF_TURN = 4  # <|im_end|> in the chat tokenizer (conftest.py)


def _import(capsys, folder: Path, run: Path) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["import", str(folder), "--name", run.name, "--out", str(run.parent)])
    out, err = capsys.readouterr()
    return code, out, err


def _exported(chat_run, tmp_path: Path, capsys) -> Path:
    """The chat run exported: a Hugging Face folder with the ChatML template in its
    tokenizer_config.json, as an instruct model is published."""
    assert main(["export", str(chat_run.run), str(tmp_path / "hf")]) == 0
    capsys.readouterr()
    return tmp_path / "hf"


def test_an_imported_chat_model_samples_as_one_and_exports_its_template_again(
    chat_run, tmp_path, capsys
):
    folder = _exported(chat_run, tmp_path, capsys)
    template = json.loads((folder / "tokenizer_config.json").read_text())["chat_template"]
    run = tmp_path / "runs" / "instruct"
    code, out, err = _import(capsys, folder, run)
    assert code == 0 and err == ""
    kept = json.loads((run / "chat_format.json").read_text())
    end = CHAT_END_OF_TURN
    assert (kept["template"], kept["end_of_turn_text"], kept["end_of_turn_ids"]) == (
        template, "<|im_end|>", [end]
    )  # fmt: skip
    assert kept["template_file"] == str((folder / "tokenizer_config.json").absolute())
    assert (
        f"Chat template: {kept['template_file']}; gpt sample --run {run} writes a prompt as a user "
        f"turn and stops at the end of the reply ('<|im_end|>', id {end}); --raw continues it as "
        "plain text." in out
    )
    # The same weights and template as the run it came from: the same reply, not a continuation.
    flags = ("--prompt", "hi", "--max-new-tokens", "8")
    code, reply, _ = _sample(capsys, run, *flags)
    assert code == 0 and reply == _sample(capsys, chat_run.run, *flags)[1]
    code, raw, _ = _sample(capsys, run, *flags, "--raw")
    assert code == 0 and raw.startswith("hi") and raw != reply
    assert main(["export", str(run), str(tmp_path / "again")]) == 0
    config = json.loads((tmp_path / "again" / "tokenizer_config.json").read_text())
    assert config["chat_template"] == template
    assert json.loads((tmp_path / "again" / "config.json").read_text())["eos_token_id"][0] == end


def test_a_template_in_chat_template_jinja_is_kept_and_a_folder_without_one_imports_as_before(
    chat_run, tmp_path, capsys
):
    """transformers 5 writes the template to chat_template.jinja, not tokenizer_config.json."""
    folder = _exported(chat_run, tmp_path, capsys)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    template = config.pop("chat_template")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    plain = tmp_path / "plain"
    assert _import(capsys, folder, plain)[0] == 0
    assert not (plain / "chat_format.json").exists()
    code, reply, _ = _sample(capsys, plain, "--prompt", "hi")
    assert code == 0 and reply == _sample(capsys, plain, "--prompt", "hi", "--raw")[1]
    assert main(["export", str(plain), str(tmp_path / "plain-hf")]) == 0
    assert "chat_template" not in json.loads(
        (tmp_path / "plain-hf" / "tokenizer_config.json").read_text()
    )
    (folder / "chat_template.jinja").write_text(template)
    jinja = tmp_path / "jinja"
    assert _import(capsys, folder, jinja)[0] == 0
    kept = json.loads((jinja / "chat_format.json").read_text())
    assert (kept["template"], kept["end_of_turn_ids"]) == (template, [CHAT_END_OF_TURN])
    assert kept["template_file"] == str((folder / "chat_template.jinja").absolute())
    assert main(["export", str(jinja), str(tmp_path / "jinja-hf")]) == 0
    again = json.loads((tmp_path / "jinja-hf" / "tokenizer_config.json").read_text())
    assert again["chat_template"] == template


def test_a_template_import_cannot_keep_is_left_out_with_a_note_naming_why(
    chat_run, tmp_path, capsys
):
    folder = _exported(chat_run, tmp_path, capsys)
    (folder / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }}")
    code, _, err = _import(capsys, folder, tmp_path / "broken")
    assert code == 0 and not (tmp_path / "broken" / "chat_format.json").exists()
    assert err == (
        f"note: The chat template in {folder / 'chat_template.jinja'} is not valid Jinja (line 1: "
        "Unexpected end of template. Jinja was looking for the following tags: 'endfor' or "
        "'else'. The innermost block that needs to be closed is 'for'.). Fix the template, or "
        "move the file away to use the plain template. The imported run keeps no chat template "
        "(gpt sample continues a prompt as plain text, gpt export writes none); fix the template "
        "and import again to keep it.\n"
    )
    (folder / "chat_template.jinja").unlink()
    (folder / "tokenizer.json").unlink()
    code, _, err = _import(capsys, folder, tmp_path / "weights")
    assert code == 0 and not (tmp_path / "weights" / "chat_format.json").exists()
    assert err == (
        f"note: {folder / 'tokenizer_config.json'} holds a chat template, but {folder} has no "
        "tokenizer.json, so the imported run (on the byte tokenizer) keeps no chat template: its "
        "token ids would not be the ones the template was written for. Put the model's "
        "tokenizer.json in the folder and import again to keep it.\n"
    )


def test_a_run_started_from_a_chat_model_on_plain_text_keeps_its_template(
    chat_run, tmp_path, capsys
):
    """From the imported run and from the Hugging Face folder itself; gpt export carries it."""
    folder = _exported(chat_run, tmp_path, capsys)
    template = json.loads((folder / "tokenizer_config.json").read_text())["chat_template"]
    assert _import(capsys, folder, tmp_path / "instruct")[0] == 0
    text = tmp_path / "text.txt"
    text.write_text("hello there , how are you ? fine , thanks !\n" * 40)
    flags = ["--set", f"data.path={text}", "--set", "train.steps=2", "--set",
             "train.batch_size=8", "--set", "train.warmup_steps=0", "--set", "train.eval_batches=1",
             "--set", "sample.max_new_tokens=4"]  # fmt: skip
    for name, source in (("from-run", tmp_path / "instruct"), ("from-hf", folder)):
        capsys.readouterr()
        args = ["train", "--init-from", str(source), "--out", str(tmp_path), "--name", name]
        assert main([*args, *flags]) == 0
        err = capsys.readouterr().err
        kept = json.loads((tmp_path / name / "chat_format.json").read_text())
        assert (kept["template"], kept["end_of_turn_ids"]) == (template, [CHAT_END_OF_TURN])
        assert kept["data"] == "text"  # what the run learnt: gpt sample continues plain text
        assert (
            f"note: the data is text, not chat, so this run keeps the chat template of "
            f"init.source {source} (from {folder / 'tokenizer_config.json'}) for gpt export to "
            "carry; gpt sample continues a prompt as plain text, as the data was written." in err
        )
        code, text, _ = _sample(capsys, tmp_path / name, "--prompt", "hello there")
        assert code == 0 and text.startswith("hello there") and "<|im_start|>" not in text
    assert main(["export", str(tmp_path / "from-run"), str(tmp_path / "ft-hf")]) == 0
    config = json.loads((tmp_path / "ft-hf" / "tokenizer_config.json").read_text())
    assert config["chat_template"] == template
    # The same tokenizer copied elsewhere keeps it; one whose ids differ does not.
    source = tmp_path / "instruct"
    vocab = json.loads((source / "tokenizer.json").read_text())
    copy, other = tmp_path / "copy.json", tmp_path / "other.json"
    copy.write_text(json.dumps(vocab))
    words = vocab["model"]["vocab"]
    words["hi"], words["hello"] = words["hello"], words["hi"]
    other.write_text(json.dumps(vocab))
    for name, tok in (("copied", copy), ("other", other)):
        args = ["train", "--init-from", str(source), "--out", str(tmp_path), "--name", name]
        assert main([*args, *flags, "--set", f"data.tokenizer={tok}"]) == 0
    assert (
        json.loads((tmp_path / "copied" / "chat_format.json").read_text())["template"] == template
    )
    assert not (tmp_path / "other" / "chat_format.json").exists()
    # Resumed after its source was deleted: the run keeps what it kept.
    shutil.rmtree(source)
    resume = ["train", "--resume", str(tmp_path / "copied"), "--set", "train.steps=3"]
    assert main(resume) == 0
    assert (
        json.loads((tmp_path / "copied" / "chat_format.json").read_text())["template"] == template
    )


def test_a_byte_level_chat_run_exported_and_imported_keeps_the_plain_template(
    tmp_path, small_args, capsys
):
    """Chats without a template of their own (the plain one, ended by NUL): the same record."""
    store = tmp_path / "store"
    assert main(["prepare", str(_chat_jsonl(tmp_path / "c.jsonl")), "--out", str(store),
                 "--val-fraction", "0.2"]) == 0  # fmt: skip
    assert main(["train", "--out", str(tmp_path), "--name", "run", *small_args,
                 "--set", f"data.path={store}", "--set", "model.mlp=swiglu",
                 "--set", "model.qk_norm=false", "--set", "model.seq_len=64"]) == 0  # fmt: skip
    assert main(["export", str(tmp_path / "run"), str(tmp_path / "hf")]) == 0
    code, out, err = _import(capsys, tmp_path / "hf", tmp_path / "back")
    assert code == 0 and err == ""
    assert "stops at the end of the reply ('\\x00', id 0)" in out
    kept = json.loads((tmp_path / "back" / "chat_format.json").read_text())
    assert kept == json.loads((tmp_path / "run" / "chat_format.json").read_text()) == _record(store)
    flags = ("--prompt", "hi 3", "--max-new-tokens", "8")
    assert (
        _sample(capsys, tmp_path / "back", *flags)[1]
        == _sample(capsys, tmp_path / "run", *flags)[1]
    )
    # Another template with the byte tokenizer has no special token to end a turn: left out.
    config = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())
    config["chat_template"] = CHATML_LIKE
    (tmp_path / "hf" / "tokenizer_config.json").write_text(json.dumps(config))
    code, _, err = _import(capsys, tmp_path / "hf", tmp_path / "other")
    assert code == 0 and not (tmp_path / "other" / "chat_format.json").exists()
    assert err == (
        f"note: {tmp_path / 'hf' / 'tokenizer_config.json'} holds a chat template other than the "
        f"plain one, but {tmp_path / 'hf'}'s tokenizer is the byte tokenizer, which has no special "
        "token to end an assistant turn, so the imported run keeps no chat template. Prepare chat "
        "data with a tokenizer.json that has one (gpt prepare --tokenizer) to train a chat model.\n"
    )


CHATML_LIKE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['content'] + '<|im_end|>' }}{% endfor %}"
)


def test_a_completion_fine_tune_of_a_chat_model_samples_as_trained_and_stops_at_end_of_text(
    chat_run, tmp_path, capsys
):
    """Prompt/completion data from a chat model: the run keeps the model's template for its
    exports, records that its data was completions, and gpt sample continues the prompt as
    plain text (no user turn the model never saw) up to the end-of-text token, as transformers'
    generate stops on the export (--raw goes on)."""
    rows = [{"prompt": f"what is two plus two ? {'hi ' * (i % 3)}", "completion": "four !"}
            for i in range(60)]  # fmt: skip
    jsonl = tmp_path / "completions.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    store = tmp_path / "store"
    assert main(["prepare", str(jsonl), "--out", str(store), "--tokenizer", str(chat_run.tokenizer),
                 "--val-fraction", "0.2"]) == 0  # fmt: skip
    args = ["train", "--init-from", str(chat_run.run), "--out", str(tmp_path), "--name", "ft",
            "--set", f"data.path={store}", "--set", "train.steps=40", "--set", "train.lr=1e-2",
            "--set", "train.batch_size=8", "--set", "train.warmup_steps=1", "--set",
            "train.eval_batches=1", "--set", "sample.max_new_tokens=6"]  # fmt: skip
    assert main(args) == 0
    run = tmp_path / "ft"
    kept = json.loads((run / "chat_format.json").read_text())
    assert kept["data"] == "completion"
    assert "note: the data is completion, not chat, so this run keeps" in capsys.readouterr().err
    prompt = "what is two plus two ?"
    code, raw, _ = _sample(capsys, run, "--prompt", prompt, "--max-new-tokens", "12", "--raw")
    assert code == 0 and raw.startswith(prompt) and "</s>" in raw, raw  # it learnt to end there
    code, text, err = _sample(capsys, run, "--prompt", prompt, "--max-new-tokens", "12")
    assert code == 0 and text == raw.partition("</s>")[0], (text, raw)
    assert (
        "note: the text ended at the tokenizer's end-of-text token (id 2) within 12 new tokens; "
        "--raw goes on past it." in err
    )
    # sample.txt too continues sample.prompt ("The ", <unk> in these words): not a chat reply
    assert (run / "sample.txt").read_text().startswith("<unk>")
