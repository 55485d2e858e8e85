"""Chat and completion data: kind detection in gpt prepare, the loss mask, chat templates, packing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from gpt_models import (
    DataConfig,
    DataError,
    eval_batches,
    load_dataset,
    main,
    prepare,
    train_batch,
)

CHATS = [
    [{"role": "system", "content": "Be brief."},
     {"role": "user", "content": f"What is {i} plus two?"},
     {"role": "assistant", "content": f"It is {i + 2}."},
     {"role": "user", "content": "Thanks!"},
     {"role": "assistant", "content": "Bye" + "!" * (i % 7)}]
    for i in range(60)
]  # fmt: skip
COMPLETIONS = [{"prompt": f"Q: {i} plus four?\nA:", "completion": f" {i + 4}"} for i in range(60)]


def _write(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _chat_jsonl(path: Path, chats: list[list[dict[str, str]]] = CHATS) -> Path:
    return _write(path, [{"messages": c} for c in chats])


def _examples(store: Path, split: str = "train") -> list[tuple[np.ndarray, np.ndarray]]:
    """(ids, mask) of each example, read from the shards as the store's docs describe them."""
    m = json.loads((store / "manifest.json").read_text())
    ids = np.concatenate([np.fromfile(store / r["file"], m["dtype"]) for r in m["shards"][split]])
    mask = np.concatenate([np.fromfile(store / r["file"], "u1") for r in m["mask_shards"][split]])
    lens = np.concatenate(
        [np.fromfile(store / r["file"], "<u4") for r in m["example_shards"][split]]
    )
    cuts = np.cumsum(lens)[:-1]
    return list(zip(np.split(ids, cuts), np.split(mask, cuts), strict=True))


def test_the_kind_is_detected_from_the_fields_of_each_line(tmp_path):
    chat = prepare([_chat_jsonl(tmp_path / "c.jsonl")], tmp_path / "chat", val_fraction=0.1)
    comp = prepare([_write(tmp_path / "p.jsonl", COMPLETIONS)], tmp_path / "comp",
                   val_fraction=0.1)  # fmt: skip
    text = prepare([_write(tmp_path / "t.jsonl", [{"text": "plain"}] * 40)], tmp_path / "text",
                   val_fraction=0.1)  # fmt: skip
    assert (chat.kind, comp.kind, text.kind) == ("chat", "completion", "text")
    for r in (chat, comp):
        m = r.manifest
        assert m["loss_mask"] is True and m["version"] == 2
        assert m["examples"]["train"] + m["examples"]["val"] == 60
        assert m["examples"]["val"] > 0  # the validation split holds whole examples too
        for split in ("train", "val"):
            assert sum(len(i) for i, _ in _examples(r.out, split)) == m["tokens"][split]
            assert (
                sum(int(k.sum()) for _, k in _examples(r.out, split)) == (m["masked_tokens"][split])
            )
    assert "loss_mask" not in text.manifest and text.manifest["version"] == 1


def test_the_mask_counts_exactly_the_assistant_contents_and_their_end(tmp_path):
    """Plain template (byte tokenizer): each example's counted bytes are its answers, each ended
    by the end-of-text byte (NUL); the rest is the prompt."""
    r = prepare([_chat_jsonl(tmp_path / "c.jsonl")], tmp_path / "st", val_fraction=0.0)
    examples = _examples(r.out)
    assert len(examples) == len(CHATS)
    for (ids, mask), chat in zip(examples, CHATS, strict=True):
        counted = bytes(ids[mask == 1].astype(np.uint8)).decode()
        assert counted == "".join(m["content"] + "\0" for m in chat if m["role"] == "assistant")
        assert bytes(ids.astype(np.uint8)).decode().startswith("<|system|>\nBe brief.\n<|user|>\n")
        assert mask[0] == 0


def test_a_completion_counts_the_completion_and_the_end_of_text(tmp_path):
    r = prepare([_write(tmp_path / "p.jsonl", COMPLETIONS)], tmp_path / "st", val_fraction=0.0)
    for (ids, mask), row in zip(_examples(r.out), COMPLETIONS, strict=True):
        text = bytes(ids.astype(np.uint8)).decode()
        assert text == row["prompt"] + row["completion"] + "\0"
        assert bytes(ids[mask == 1].astype(np.uint8)).decode() == row["completion"] + "\0"


def test_a_chat_template_renders_to_the_ids_worked_out_by_hand(tmp_path, chat_tokenizer):
    """The template's text, tokenized: ids and mask written out token by token."""
    v = chat_tokenizer.vocab
    chatml = chat_tokenizer(chat_tokenizer.CHATML, "chatml")
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": " hello there "},
            {"role": "user", "content": "bye"}]  # fmt: skip
    _chat_jsonl(tmp_path / "c.jsonl", [chat])
    r = prepare([tmp_path / "c.jsonl"], tmp_path / "a", tokenizer=str(chatml), val_fraction=0.0)
    [(ids, mask)] = _examples(r.out)
    # <s><|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello there<|im_end|>\n<|im_start|>user\nbye<|im_end|>\n
    # (the template trims each content)
    want = ["<s>", "<|im_start|>", "user", "\n", "hi", "<|im_end|>", "\n",
            "<|im_start|>", "assistant", "\n", "hello", " ", "there", "<|im_end|>", "\n",
            "<|im_start|>", "user", "\n", "bye", "<|im_end|>", "\n"]  # fmt: skip
    assert ids.tolist() == [v[w] for w in want]
    assert mask.tolist() == [0] * 10 + [1] * 5 + [0] * 6

    inst = chat_tokenizer(chat_tokenizer.INST, "inst")
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"}, {"role": "user", "content": "how are you"},
            {"role": "assistant", "content": "fine"}]  # fmt: skip
    _chat_jsonl(tmp_path / "i.jsonl", [chat])
    r = prepare([tmp_path / "i.jsonl"], tmp_path / "b", tokenizer=str(inst), val_fraction=0.0)
    [(ids, mask)] = _examples(r.out)
    # <s>[INST] be brief | hi [/INST] hello </s><s>[INST] how are you [/INST] fine </s>
    want = ["<s>", "[INST]", " ", "be", " ", "brief", " ", "|", " ", "hi", " ", "[/INST]",
            " ", "hello", " ", "</s>",
            "<s>", "[INST]", " ", "how", " ", "are", " ", "you", " ", "[/INST]",
            " ", "fine", " ", "</s>"]  # fmt: skip
    assert ids.tolist() == [v[w] for w in want]
    counted = [w for w, k in zip(want, mask.tolist(), strict=True) if k]
    assert counted == ["hello", " ", "</s>", "fine", " ", "</s>"]


@pytest.mark.interop
def test_chat_template_ids_equal_transformers_apply_chat_template(tmp_path, chat_tokenizer):
    """The ids gpt prepare writes for a conversation are transformers' ``apply_chat_template``'s,
    for a word-level and a byte-level BPE tokenizer (runs where transformers is installed: the
    ``interop`` nox session)."""
    transformers = pytest.importorskip("transformers")
    chats = [
        CHATS[3],
        CHATS[11][1:],
        [
            {"role": "user", "content": 'naïve "quotes" <b>'},
            {"role": "assistant", "content": "  spaced\n\nout  "},
        ],
    ]
    folders = [chat_tokenizer(chat_tokenizer.CHATML, "chatml"),
               chat_tokenizer(chat_tokenizer.INST, "inst"),
               _bpe_with_template(tmp_path, chat_tokenizer.CHATML)]  # fmt: skip
    compared = 0
    for k, tok_json in enumerate(folders):
        hf = transformers.AutoTokenizer.from_pretrained(tok_json.parent)
        _chat_jsonl(tmp_path / f"in{k}.jsonl", chats)
        r = prepare([tmp_path / f"in{k}.jsonl"], tmp_path / f"st{k}", tokenizer=str(tok_json),
                    val_fraction=0.0)  # fmt: skip
        for (ids, _), chat in zip(_examples(r.out), chats, strict=True):
            theirs = hf.apply_chat_template(chat, tokenize=True)
            theirs = theirs["input_ids"] if not isinstance(theirs, list) else theirs  # v5: a dict
            assert ids.tolist() == list(theirs), (tok_json, chat)
            compared += 1
    assert compared == 9


def _bpe_with_template(tmp_path: Path, template: str) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<s>", "</s>", "<|im_start|>", "<|im_end|>"])  # fmt: skip
    tok.train_from_iterator([json.dumps(c) for c in CHATS] * 3, trainer)
    folder = tmp_path / "bpe"
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
              "eos_token": "</s>", "chat_template": template}  # fmt: skip
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder / "tokenizer.json"


def test_the_mask_follows_a_byte_level_bpe_tokenizers_offsets(tmp_path, chat_tokenizer):
    """Tokens that merge characters: the counted ids decode to exactly the answers and their
    end-of-turn text."""
    tok_json = _bpe_with_template(tmp_path, chat_tokenizer.CHATML)
    r = prepare([_chat_jsonl(tmp_path / "c.jsonl", CHATS[:20])], tmp_path / "st",
                tokenizer=str(tok_json), val_fraction=0.0)  # fmt: skip
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tok_json))
    for (ids, mask), chat in zip(_examples(r.out), CHATS[:20], strict=True):
        counted = tok.decode(ids[mask == 1].tolist(), skip_special_tokens=False)
        assert counted == "".join(
            m["content"] + "<|im_end|>\n" for m in chat if m["role"] == "assistant"
        )


def _store(tmp_path: Path, chats: list[list[dict[str, str]]] = CHATS, name: str = "st") -> Path:
    return prepare([_chat_jsonl(tmp_path / f"{name}.jsonl", chats)], tmp_path / name,
                   val_fraction=0.2).out  # fmt: skip


def test_packed_batches_are_deterministic_and_never_split_an_example(tmp_path):
    store = _store(tmp_path)
    whole = {tuple(ids.tolist()) for s in ("train", "val") for ids, _ in _examples(store, s)}
    ds = load_dataset(DataConfig(path=str(store)), seq_len=255, vocab_size=256)
    assert ds.loss_mask and ds.notes == ()
    kw = {"seed": 3, "batch_size": 8, "grad_accum": 2, "seq_len": 255}
    a, b = train_batch(ds.train, 5, **kw), train_batch(ds.train, 5, **kw)
    assert set(a) == {"tokens", "mask", "segments"}
    assert a["tokens"].shape == a["mask"].shape == a["segments"].shape == (2, 4, 256)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["tokens"], train_batch(ds.train, 6, **kw)["tokens"])
    halves = [train_batch(ds.train, 5, **kw, process_index=p, process_count=2) for p in (0, 1)]
    assert np.array_equal(np.concatenate([h["tokens"] for h in halves], axis=1), a["tokens"])
    packed = 0
    for tok, mask, seg in zip(*(a[k].reshape(8, 256) for k in ("tokens", "mask", "segments")),
                              strict=True):  # fmt: skip
        pad = seg == 0
        assert not tok[pad].any() and not mask[pad].any()
        assert np.all(np.diff(seg[~pad]) >= 0) and pad[np.argmax(pad) :].all()
        for s in range(1, seg.max() + 1):
            at = np.flatnonzero(seg == s)
            assert tuple(tok[at].tolist()) in whole and mask[at[0]] == 0
            packed += 1
    assert packed > 8  # rows hold more than one example
    ev = eval_batches(ds.val, n_batches=2, batch_size=4, seq_len=255)
    assert ev["tokens"].shape == (2, 4, 256)
    assert np.array_equal(ev["tokens"], eval_batches(ds.val, n_batches=2, batch_size=4,
                                                     seq_len=255)["tokens"])  # fmt: skip


def test_examples_longer_than_a_row_are_left_out_and_counted(tmp_path):
    long = [[{"role": "user", "content": "x" * 300}, {"role": "assistant", "content": "y"}]]
    store = _store(tmp_path, CHATS + long * 8)
    ds = load_dataset(DataConfig(path=str(store)), seq_len=127, vocab_size=256)
    examples = json.loads((store / "manifest.json").read_text())["examples"]
    # One line per split: lines 61 to 68 hold the long examples (326 ids each); 63, 65 and 67
    # went to the validation split (the split is a fixed hash of file name and line).
    assert ds.notes == tuple(
        f"note: {n} of the {examples[split]} examples of the {split} split of {store} are longer "
        f"than model.seq_len + 1 = 128 tokens and are left out (the first is st.jsonl:{first}; "
        f"the longest has 326 tokens, at st.jsonl:{first}; examples are never cut). To keep them, "
        "set --set model.seq_len=325 (or more), or shorten them."
        for n, split, first in ((5, "train", 61), (3, "val", 63))
    )
    batch = train_batch(ds.train, 0, seed=0, batch_size=16, grad_accum=1, seq_len=127)
    assert not (batch["tokens"] == ord("x")).any()  # no long example, cut or whole


def test_a_store_whose_every_example_is_too_long_is_refused(tmp_path):
    store = _store(tmp_path)
    with pytest.raises(DataError, match=r"Every one of the \d+ examples of the train split .* "
                                        r"longer than a row of model.seq_len \+ 1 = 17 tokens "
                                        r"\(the shortest has 108, at st.jsonl:1\)"):  # fmt: skip
        load_dataset(DataConfig(path=str(store)), seq_len=16, vocab_size=256)


def test_a_mixture_of_example_stores_is_refused(tmp_path):
    from gpt_models import DataSource

    store = _store(tmp_path)
    sources = (DataSource(path=str(store), weight=1.0), DataSource(path=str(store), weight=1.0))
    with pytest.raises(DataError, match=r"data.sources\[0\] .* loss mask.*not supported"):
        load_dataset(DataConfig(sources=sources), seq_len=255, vocab_size=256)


def test_an_interrupted_chat_prepare_resumes_to_the_same_store(tmp_path, kill_prepare):
    src = _chat_jsonl(tmp_path / "c.jsonl")
    whole = prepare([src], tmp_path / "whole", val_fraction=0.2, shard_tokens=700).manifest
    kill_prepare(4)  # after the 4th chunk's ids, masks and lengths, before its state
    with pytest.raises(KeyboardInterrupt):
        prepare([src], tmp_path / "st", val_fraction=0.2, shard_tokens=700)
    kill_prepare(None)
    again = prepare([src], tmp_path / "st", val_fraction=0.2, shard_tokens=700).manifest
    fields = ("shards", "mask_shards", "example_shards", "origin_shards", "examples")
    for field in (*fields, "masked_tokens"):
        assert again[field] == whole[field], field
    (tmp_path / "st" / again["mask_shards"]["train"][0]["file"]).unlink()
    with pytest.raises(DataError, match=r"train-mask-00000.bin listed in .* is missing"):
        load_dataset(DataConfig(path=str(tmp_path / "st")), seq_len=255, vocab_size=256)


def test_a_prepare_an_older_gpt_models_began_resumes_without_origins(tmp_path, kill_prepare):
    src = _chat_jsonl(tmp_path / "c.jsonl")
    whole = prepare([src], tmp_path / "whole", val_fraction=0.2, shard_tokens=700).manifest
    kill_prepare(4)
    with pytest.raises(KeyboardInterrupt):
        prepare([src], tmp_path / "st", val_fraction=0.2, shard_tokens=700)
    kill_prepare(None)
    # What an older gpt prepare leaves when killed: its progress without origin writers, and no
    # origin shards. Resumed here, the store is that of before: no origins, the same examples.
    state_file = tmp_path / "st" / ".prepare-state.json"
    state = json.loads(state_file.read_text())
    state["writers"] = {k: w for k, w in state["writers"].items() if "-origins" not in k}
    state_file.write_text(json.dumps(state))
    for path in (tmp_path / "st").glob("*-origins-*"):
        path.unlink()
    again = prepare([src], tmp_path / "st", val_fraction=0.2, shard_tokens=700).manifest
    assert "origin_shards" not in again and not list((tmp_path / "st").glob("*-origins-*"))
    for field in ("shards", "mask_shards", "example_shards", "examples", "masked_tokens"):
        assert again[field] == whole[field], field
    assert load_dataset(
        DataConfig(path=str(tmp_path / "st")), seq_len=255, vocab_size=256
    ).loss_mask


def test_origins_that_do_not_cover_the_examples_are_refused_before_training(tmp_path):
    store = tmp_path / "st"
    prepare([_chat_jsonl(tmp_path / "c.jsonl")], store, val_fraction=0.2)
    manifest = json.loads((store / "manifest.json").read_text())
    examples = manifest["examples"]["train"]
    manifest["origin_shards"]["train"][0]["tokens"] -= 2  # one example's (input, line) gone
    (store / "manifest.json").write_text(json.dumps(manifest))
    needle = (f"origin_shards.train hold {2 * examples - 2:,} values, but its {examples:,} "
              f"examples need two each ({2 * examples:,})")  # fmt: skip
    with pytest.raises(DataError, match=re.escape(needle)):
        load_dataset(DataConfig(path=str(store)), seq_len=255, vocab_size=256)


def _conversation(*roles_contents: tuple[str, object]) -> dict[str, object]:
    return {"messages": [{"role": r, "content": c} for r, c in roles_contents]}


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        (_conversation(("human", "hi"), ("assistant", "hello")),
         r"c.jsonl:2 is a chat line, but messages\[0\] has the unknown role 'human'.*use one of "
         r"system, user, assistant"),
        (_conversation(("system", "x"), ("user", "hi")),
         r"c.jsonl:2 .* the conversation has no assistant turn \(roles: system, user\).*add one"),
        (_conversation(("user", "hi"), ("assistant", ["hel", "lo"])),
         r"c.jsonl:2 .* messages\[1\].content is list \['hel', 'lo'\].*make each content a string"),
        ({"messages": "hi"}, r'c.jsonl:2 .* "messages" is str .*non-empty list'),
        ({"prompt": "a", "completion": "b"},
         r"c.jsonl:2 holds a completion example, but .*c.jsonl:1 \(where the inputs begin\) "
         r"holds a chat example.*prepare each kind into its own --out"),
        ({"text": "plain"}, r"c.jsonl:2 holds plain text, but .* holds a chat example"),
        # OpenAI's per-turn weight: 0 or 1, on assistant turns
        ({"messages": [{"role": "user", "content": "hi"},
                       {"role": "assistant", "content": "yo", "weight": 0.5}]},
         r'c.jsonl:2 is a chat line, but messages\[1\] has "weight": 0.5.*fix: give "weight": 0 '
         r"\(do not train on this turn\) or 1 \(train on it, the default\), as OpenAI's "
         r"fine-tuning format defines it\.$"),
        ({"messages": [{"role": "user", "content": "hi"},
                       {"role": "assistant", "content": "yo", "weight": True}]},
         r'messages\[1\] has "weight": True'),
        ({"messages": [{"role": "user", "content": "hi", "weight": 1},
                       {"role": "assistant", "content": "yo"}]},
         r'c.jsonl:2 .* messages\[0\] \(a user turn\) has a "weight".*fix: weight applies to '
         r"assistant turns, the only ones the loss counts: remove it"),
        ({"messages": [{"role": "user", "content": "hi"},
                       {"role": "assistant", "content": "yo", "weight": 0}]},
         r'c.jsonl:2 .* every assistant turn has "weight": 0, so the loss counts nothing of it'),
    ],
)  # fmt: skip
def test_a_bad_chat_line_is_one_error_naming_file_and_line(tmp_path, capsys, error_line, line,
                                                           needle):  # fmt: skip
    _write(tmp_path / "c.jsonl", [{"messages": CHATS[0]}, line])
    assert main(["prepare", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "st")]) == 2
    assert re.search(needle, error_line(capsys.readouterr().err))
    assert not (tmp_path / "st").exists()  # a refused prepare takes back what it wrote


def test_a_template_that_fails_to_render_names_its_file_and_jinjas_message(
    tmp_path, capsys, error_line, chat_tokenizer
):
    inst = chat_tokenizer(chat_tokenizer.INST, "inst")
    _chat_jsonl(tmp_path / "c.jsonl", [CHATS[0][1:], [CHATS[0][2], CHATS[0][1]]])
    assert main(["prepare", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "st"),
                 "--tokenizer", str(inst)]) == 2  # fmt: skip
    line = error_line(capsys.readouterr().err)
    assert re.search(r"The chat template in .*inst/tokenizer_config.json failed to render the "
                     r"conversation of .*c.jsonl:2 \(TemplateError: Conversation roles must "
                     r"alternate", line), line  # fmt: skip
    broken = chat_tokenizer("{% for m in messages %}{{ m.content }", "broken")
    assert main(["prepare", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "st"),
                 "--tokenizer", str(broken)]) == 2  # fmt: skip
    line = error_line(capsys.readouterr().err)
    assert re.search(r"The chat template in .*broken/tokenizer_config.json is not valid Jinja "
                     r"\(line 1: ", line), line  # fmt: skip


def test_gpt_prepare_says_what_it_wrote(tmp_path, capsys):
    _chat_jsonl(tmp_path / "c.jsonl")
    assert main(["prepare", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "st"),
                 "--val-fraction", "0.2"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert main(["prepare", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "st"),
                 "--val-fraction", "0.2"]) == 0  # fmt: skip
    assert "is up to date: same inputs and settings, every shard verifies" in (
        capsys.readouterr().out
    )
    m = json.loads((tmp_path / "st" / "manifest.json").read_text())
    share = sum(m["masked_tokens"].values()) / sum(m["tokens"].values())
    assert (
        f"chat data, {m['examples']['train']} train / {m['examples']['val']} val examples with a "
        f"loss mask ({share:.1%} of the tokens counted: "
    ) in out


def test_a_bpe_trained_here_ends_each_answer_with_its_end_of_text_token(tmp_path):
    from gpt_models import BPETokenizer

    r = prepare([_chat_jsonl(tmp_path / "c.jsonl")], tmp_path / "st", tokenizer="bpe",
                bpe_vocab_size=300, val_fraction=0.0)  # fmt: skip
    tok = BPETokenizer.load(r.out / "tokenizer.json")
    for (ids, mask), chat in zip(_examples(r.out), CHATS, strict=True):
        answers = [m["content"] + "<|endoftext|>" for m in chat if m["role"] == "assistant"]
        assert tok.decode(ids[mask == 1]) == "".join(answers)


def test_an_end_of_text_token_that_is_not_an_added_token_is_refused(tmp_path):
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate(["<unk>", "</s>", "Q", "A", ":", " ", "<", "/", "s", ">"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"\w+|\s|[^\w\s]"), behavior="isolated")
    tok.save(str(tmp_path / "tokenizer.json"))
    _write(tmp_path / "p.jsonl", COMPLETIONS)
    with pytest.raises(DataError, match=r"end-of-text token '</s>' \(id 1\) is not one of its "
                                        r"added tokens: its text tokenizes to \[6, 7, 8, 9\].*"
                                        r'"added_tokens"'):  # fmt: skip
        prepare([tmp_path / "p.jsonl"], tmp_path / "st", tokenizer=str(tmp_path / "tokenizer.json"))


@pytest.mark.parametrize(
    ("template", "needle"),
    [
        ("{% for m in messages %}{% if loop.last %}[last]{% endif %}{{ m.role }}: {{ m.content }}\n"
         "{% endfor %}",
         r"renders the first 2 messages of .*c.jsonl:1 as text that does not begin the text of the "
         r"whole conversation .*move tokenizer_config.json away to use the plain template"),
        ("{% for m in messages %}{{ m.role }}: {{ m.content | upper }}\n{% endfor %}",
         r"does not render the assistant content of messages\[1\] of .*c.jsonl:1 as given"),
        ({"name": "tools", "template": "x"}, r"chat_template is dict, expected the template's text"),
    ],
)  # fmt: skip
def test_a_template_that_hides_the_answers_is_refused(tmp_path, chat_tokenizer, template, needle):
    tok = chat_tokenizer(template)
    _chat_jsonl(tmp_path / "c.jsonl", [CHATS[0][1:]])
    with pytest.raises(DataError, match=needle):
        prepare([tmp_path / "c.jsonl"], tmp_path / "st", tokenizer=str(tok), val_fraction=0.0)
    assert not (tmp_path / "st").exists()


def test_a_damaged_tokenizer_config_is_named(tmp_path, chat_tokenizer):
    tok = chat_tokenizer(None)
    (tok.parent / "tokenizer_config.json").write_text("{not json", encoding="utf-8")
    _chat_jsonl(tmp_path / "c.jsonl", CHATS[:3])
    with pytest.raises(DataError, match=r"tokenizer_config.json \(beside --tokenizer .*\) is not "
                                        r"valid JSON .*move it away to use the plain template"):  # fmt: skip
        prepare([tmp_path / "c.jsonl"], tmp_path / "st", tokenizer=str(tok), val_fraction=0.0)
    (tok.parent / "tokenizer_config.json").write_text("[]", encoding="utf-8")
    with pytest.raises(DataError, match=r"tokenizer_config.json \(beside .*\) holds list, expected "
                                        r"a JSON object"):  # fmt: skip
        prepare([tmp_path / "c.jsonl"], tmp_path / "st", tokenizer=str(tok), val_fraction=0.0)
    (tok.parent / "tokenizer_config.json").write_text("{}", encoding="utf-8")  # no template
    r = prepare([tmp_path / "c.jsonl"], tmp_path / "st", tokenizer=str(tok), val_fraction=0.0)
    assert r.manifest["settings"]["chat_template"] is None  # the plain template


def test_gpt_prepare_takes_a_hugging_face_folder_as_its_tokenizer(tmp_path, chat_tokenizer, capsys):
    """``--tokenizer FOLDER`` reads the folder's tokenizer.json and the chat template beside it, as
    ``gpt import`` and ``--init-from`` take folders: the very store ``--tokenizer FILE`` writes."""
    file = chat_tokenizer(chat_tokenizer.CHATML, "hf-model")
    (file.parent / "config.json").write_text("{}")  # a model folder: its other files do not matter
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there !"}]
    _chat_jsonl(tmp_path / "c.jsonl", [chat] * 3)
    argv = ["prepare", str(tmp_path / "c.jsonl"), "--val-fraction", "0"]
    assert main([*argv, "--out", str(tmp_path / "by-folder"), "--tokenizer", str(file.parent)]) == 0
    assert "Chat template: " in capsys.readouterr().out
    assert main([*argv, "--out", str(tmp_path / "by-file"), "--tokenizer", str(file)]) == 0
    capsys.readouterr()
    by_folder, by_file = _examples(tmp_path / "by-folder"), _examples(tmp_path / "by-file")
    assert [(i.tolist(), m.tolist()) for i, m in by_folder] == [
        (i.tolist(), m.tolist()) for i, m in by_file
    ]
    assert by_folder[0][0][1] == chat_tokenizer.vocab["<|im_start|>"]  # the template rendered it
    # the same settings either way: the file path confirms the store the folder wrote
    assert main([*argv, "--out", str(tmp_path / "by-folder"), "--tokenizer", str(file)]) == 0
    assert "is up to date" in capsys.readouterr().out


def test_a_tokenizer_folder_without_a_tokenizer_json_is_refused(tmp_path, capsys):
    _chat_jsonl(tmp_path / "c.jsonl")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "tokenizer.model").write_bytes(b"\0")
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text("")
    for folder, needle in [
        (model, f"gpt prepare --tokenizer {model}: the folder has no tokenizer.json (it holds "
                "config.json, tokenizer.model). Expected byte, bpe, a tokenizer.json or a Hugging "
                f"Face folder holding one; save the model's tokenizer in the tokenizers library's "
                f"format there (transformers: AutoTokenizer.from_pretrained('{model}')"),
        (run, "(it is a run folder of the byte tokenizer, which needs no file). Expected byte, "
              "bpe, a tokenizer.json or a Hugging Face folder holding one; pass --tokenizer byte."),
    ]:  # fmt: skip
        argv = ["prepare", str(tmp_path / "c.jsonl"), "--out", str(tmp_path / "st")]
        assert main([*argv, "--tokenizer", str(folder)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("gpt: error: ") and needle in err and len(err.splitlines()) == 1, err
        assert not (tmp_path / "st").exists()


def test_openai_weight_0_leaves_a_turn_out_of_the_loss_and_other_keys_get_a_note(tmp_path,
                                                                                  capsys):  # fmt: skip
    """OpenAI's fine-tuning format: ``"weight": 0`` on an assistant message is not trained on; the
    turn is still in the text the later turns follow. Keys other than role, content and weight
    (``name``, ``tool_calls``) are named in one note."""
    weighted = [
        {"role": "user", "content": "Say hi.", "name": "ann"},
        {"role": "assistant", "content": "Hello, I am a bad answer.", "weight": 0},
        {"role": "user", "content": "Again."},
        {"role": "assistant", "content": "Hi!", "weight": 1},
    ]
    plain = [{k: v for k, v in m.items() if k in ("role", "content")} for m in weighted]
    _write(tmp_path / "w.jsonl", [{"messages": weighted}] * 3 + [{"messages": plain}])
    assert main(["prepare", str(tmp_path / "w.jsonl"), "--out", str(tmp_path / "st"),
                 "--val-fraction", "0"]) == 0  # fmt: skip
    err = capsys.readouterr().err
    assert (f"note: messages' keys other than role, content and weight are left out: 'name' (3 "
            f"lines, first {tmp_path / 'w.jsonl'}:1)") in err  # fmt: skip
    examples = _examples(tmp_path / "st")
    for (ids, mask), chat in zip(examples, [weighted] * 3 + [plain], strict=True):
        text = bytes(ids.astype(np.uint8)).decode()
        assert "<|assistant|>\nHello, I am a bad answer.\0<|user|>" in text  # rendered all the same
        counted = bytes(ids[mask == 1].astype(np.uint8)).decode()
        want = [
            m["content"] + "\0" for m in chat if m["role"] == "assistant" and m.get("weight", 1)
        ]
        assert counted == "".join(want)
    assert [int(m.sum()) for _, m in examples] == [4, 4, 4, 4 + len("Hello, I am a bad answer.\0")]
    manifest = json.loads((tmp_path / "st" / "manifest.json").read_text())
    assert manifest["masked_tokens"]["train"] == 3 * 4 + 4 + 26
