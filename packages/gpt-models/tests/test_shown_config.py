"""`gpt config show` shows the run's config: the vocabulary gpt train resolves, the
parameter count, and notes whose suggestions the config accepts."""

import re

from gpt_models import PRESETS, apply_overrides, main, param_count


def _show(capsys, *flags):
    assert main(["config", "show", *flags]) == 0
    return capsys.readouterr()


def test_a_preset_shows_the_vocab_and_parameters_gpt_train_uses(capsys):
    shown = _show(capsys, "--config", "gpt2-small")
    assert re.search(r"^vocab_size = 256  #", shown.out, re.MULTILINE)  # the byte tokenizer's
    byte_vocab = {"model.vocab_size": "256", "model.vocab_real": "0"}
    trained = apply_overrides(PRESETS["gpt2-small"], byte_vocab, from_text=True)
    count = param_count(trained.model) / 1e6
    assert shown.out.splitlines()[1] == f"# {count:.2f}M parameters"
    assert "model.vocab_size = 50304 -> 256" in shown.err  # the same note gpt train prints


def test_a_bpe_vocab_says_on_its_line_that_it_needs_the_data(capsys):
    out = _show(capsys, "--set", "data.tokenizer=bpe").out
    line = next(x for x in out.splitlines() if x.startswith("vocab_size = "))
    assert "needs the data: gpt train trains the bpe tokenizer on it" in line
    assert "(with this vocab_size; the trained tokenizer decides it)" in out.splitlines()[1]


def test_the_warmup_note_suggests_only_accepted_values(capsys):
    err = _show(capsys, "--set", "train.steps=1").err
    assert "--set train.warmup_steps=0" in err and "N < 1" not in err
    err = _show(capsys, "--set", "train.steps=20").err
    assert "N from 0 to 19" in err
    for value in ("0", "19"):  # both ends are accepted and fit
        cfg = apply_overrides(PRESETS["tiny"], {"train.steps": "20", "train.warmup_steps": value},
                              from_text=True)  # fmt: skip
        assert cfg.train.warmup_steps == int(value)
