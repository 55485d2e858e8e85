import dataclasses
import re

import jax
import pytest

import gpt_models
from gpt_models import PRESETS, Config, ConfigError, apply_overrides, init_params, load_config, main


def _show(capsys, *flags):
    assert main(["config", "show", *flags]) == 0
    return capsys.readouterr()


def _shown_keys(text):
    """``{"section.key": (value text, meaning)}`` from `gpt config show` output."""
    keys, section = {}, None
    for line in text.splitlines():
        if m := re.fullmatch(r"\[(\w+)\]", line):
            section = m.group(1)
        elif m := re.fullmatch(r"(\w+) = (.+?)  # (.+)", line):
            keys[f"{section}.{m.group(1)}"] = (m.group(2), m.group(3))
    return keys


def test_presets_exist_and_are_valid_configs():
    assert {"tiny", "gpt2-small", "gpt2-medium"} <= set(PRESETS)
    for cfg in PRESETS.values():
        assert dataclasses.replace(cfg) == cfg  # rebuilding runs Config's checks again


def test_gpt2_small_is_124m_with_tied_embeddings():
    cfg = PRESETS["gpt2-small"].model
    assert cfg.tie_embeddings and (cfg.d_model, cfg.n_layers, cfg.n_heads) == (768, 12, 12)
    shapes = jax.eval_shape(lambda: init_params(cfg, jax.random.key(0)))
    assert round(sum(x.size for x in jax.tree.leaves(shapes)) / 1e6) == 124


def test_config_show_lists_every_key_with_its_value_and_meaning(capsys):
    shown = _shown_keys(_show(capsys).out)
    sections = {f.name: f.type for f in dataclasses.fields(Config)}
    expected = {
        f"{name}.{field.name}"
        for name in sections
        for field in dataclasses.fields(getattr(gpt_models, sections[name]))
    }
    assert set(shown) == expected and len(expected) >= 45
    assert all(len(meaning) > 10 for _, meaning in shown.values())
    # Each meaning is whole: docstring entries that wrap onto a second line are joined.
    assert all(meaning.endswith((".", ")")) for _, meaning in shown.values()), shown
    assert shown["data.tokenizer"][1].endswith("model.vocab_size follows the tokenizer.")
    assert shown["train.steps"] == ("300", "optimizer steps of the whole run.")
    assert shown["model.mlp"][0] == '"relu2"'


def test_design_keys_exist(capsys):
    keys = set(_shown_keys(_show(capsys).out))
    wanted = [
        "model.vocab_size", "model.seq_len", "model.d_model", "model.n_layers", "model.n_heads",
        "model.n_kv_heads", "model.mlp", "model.norm", "model.pos", "model.tie_embeddings",
        "model.dtype", "train.steps", "train.batch_size", "train.lr", "train.warmup_steps",
        "train.grad_accum", "train.eval_every", "train.checkpoint_every", "train.keep_checkpoints",
        "train.seed", "data.path", "data.val_fraction", "mesh.data", "mesh.fsdp", "mesh.tensor",
        "log.wandb",
    ]  # fmt: skip
    assert set(wanted) <= keys


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_config_show_output_loads_back_as_the_same_config(tmp_path, capsys, preset):
    path = tmp_path / "mine.toml"
    path.write_text(_show(capsys, "--config", preset).out)
    # The shown config is the run's: with the byte tokenizer of the default data, 256 ids.
    byte_vocab = {"model.vocab_size": "256", "model.vocab_real": "0"}
    assert load_config(str(path)) == apply_overrides(PRESETS[preset], byte_vocab, from_text=True)


def test_config_show_applies_set_parsed_by_type(tmp_path, capsys):
    odd = 'quote " and \\ and é\n#'
    sets = ["model.d_model=256", "train.lr=1e-3", "model.qk_norm=false", "train.steps=1_000",
            "model.mlp=swiglu", "data.path=a=b.txt", f"sample.prompt={odd}"]  # fmt: skip
    path = tmp_path / "mine.toml"
    path.write_text(_show(capsys, *[x for s in sets for x in ("--set", s)]).out)
    cfg = load_config(str(path))
    assert (cfg.model.d_model, cfg.train.lr, cfg.model.qk_norm) == (256, 1e-3, False)
    assert (cfg.train.steps, cfg.model.mlp, cfg.data.path) == (1000, "swiglu", "a=b.txt")
    assert cfg.sample.prompt == odd


def test_config_show_cuts_a_warmup_longer_than_the_run_as_train_would(capsys):
    shown = _show(capsys, "--set", "train.steps=20")
    assert _shown_keys(shown.out)["train.warmup_steps"][0] == "2"
    assert shown.err.startswith("note: train.warmup_steps = 30 does not fit in train.steps = 20")


def test_config_show_errors_exit_2(tmp_path, capsys):
    assert main(["config", "show", "--set", "model.d_model"]) == 2
    assert "--set expects KEY=VALUE, got 'model.d_model'" in capsys.readouterr().err
    assert main(["config", "show", "--config", "gpt2-smal"]) == 2
    assert "Unknown preset 'gpt2-smal'. Did you mean 'gpt2-small'?" in capsys.readouterr().err
    assert main(["config", "show", "--run", str(tmp_path)]) == 2
    assert f"--run {tmp_path}: not a run folder" in capsys.readouterr().err
    assert main(["config", "show", "--run", str(tmp_path), "--config", "tiny"]) == 2
    assert "takes --run or --config, not both" in capsys.readouterr().err


def test_unknown_key_suggests_and_lists():
    with pytest.raises(ConfigError) as info:
        apply_overrides(PRESETS["tiny"], {"model.d_modle": "3"}, from_text=True)
    text = str(info.value)
    assert "Unknown config key 'model.d_modle'" in text
    assert "Did you mean 'model.d_model'?" in text
    assert "'model.n_layers'" in text  # lists the valid keys of the section


def test_unknown_section_lists_sections():
    with pytest.raises(
        ConfigError, match=r"Valid sections: 'data', 'eval', 'init', 'log', 'lora', 'mesh', 'model'"
    ):
        apply_overrides(PRESETS["tiny"], {"modle.x": "3"}, from_text=True)


def test_bad_value_names_expected_type():
    with pytest.raises(ConfigError, match=r"model.d_model got 'big', expected an integer"):
        apply_overrides(PRESETS["tiny"], {"model.d_model": "big"}, from_text=True)
    with pytest.raises(ConfigError, match=r"train.steps got True, expected an integer"):
        apply_overrides(PRESETS["tiny"], {"train.steps": True})
    with pytest.raises(ConfigError, match=r"model.qk_norm got 'maybe', expected true or false"):
        apply_overrides(PRESETS["tiny"], {"model.qk_norm": "maybe"}, from_text=True)
    with pytest.raises(ConfigError, match=r"model.mlp got 3, expected a string\. Valid values: "):
        apply_overrides(PRESETS["tiny"], {"model.mlp": 3})


def test_bad_choice_lists_choices():
    with pytest.raises(ConfigError) as info:
        apply_overrides(PRESETS["tiny"], {"model.mlp": "swiglue"}, from_text=True)
    text = str(info.value)
    assert "model.mlp = 'swiglue' must be one of 'geglu', 'gelu', 'relu2', 'swiglu'" in text
    assert "Did you mean 'swiglu'?" in text


def test_every_problem_reported_at_once():
    with pytest.raises(ConfigError) as info:
        apply_overrides(PRESETS["tiny"], {"model.x": 1, "train.lr": "fast"}, from_text=True)
    assert "2 problems" in str(info.value)


def test_a_config_checks_itself_when_built():
    tiny = PRESETS["tiny"]
    with pytest.raises(ConfigError) as info:
        dataclasses.replace(
            tiny,
            model=dataclasses.replace(tiny.model, d_model=130, n_kv_heads=3, norm="batchnorm"),
            train=dataclasses.replace(tiny.train, batch_size=10, grad_accum=4),
        )
    text = str(info.value)
    assert "model.d_model = 130 must be divisible by model.n_heads = 4" in text
    assert "model.n_kv_heads = 3 must divide model.n_heads = 4" in text
    assert "train.batch_size = 10 must be divisible by train.grad_accum = 4" in text
    assert "model.norm = 'batchnorm' must be one of 'layernorm', 'rmsnorm'" in text


def test_the_sample_section_is_checked_and_rope_skipped_on_bad_heads():
    tiny = PRESETS["tiny"]
    sample = dataclasses.replace(tiny.sample, temperature=-0.5, top_k=-1, top_p=2.0)
    model = dataclasses.replace(tiny.model, n_heads=5, pos="rope")
    with pytest.raises(ConfigError) as info:
        dataclasses.replace(tiny, sample=sample, model=model)
    text = str(info.value)
    assert "sample.temperature = -0.5 must be a finite number >= 0 (0 is greedy)" in text
    assert (
        "sample.top_k = -1 must be >= 0" in text and "sample.top_p = 2.0 must be in (0, 1]" in text
    )
    assert "must be divisible by model.n_heads = 5" in text and "RoPE" not in text


def test_load_config_errors(tmp_path):
    with pytest.raises(
        ConfigError, match=r"Unknown preset 'gpt2-smal'\. Did you mean 'gpt2-small'"
    ):
        load_config("gpt2-smal")
    with pytest.raises(ConfigError, match=r"Config file .*nope.toml does not exist"):
        load_config(str(tmp_path / "nope.toml"))
    bad = tmp_path / "bad.toml"
    bad.write_text("[model\n")
    with pytest.raises(ConfigError, match=r"is not valid TOML"):
        load_config(str(bad))


def test_partial_toml_file_uses_named_preset(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('preset = "gpt2-small"\n[train]\nsteps = 1000\n')
    cfg = load_config(str(path))
    assert cfg.model.d_model == 768 and cfg.train.steps == 1000
    path.write_text("[train]\nstpes = 7\n")
    with pytest.raises(ConfigError, match=r"In .*mine.toml: Unknown config key 'train.stpes'"):
        load_config(str(path))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("train.init_from", "init.source"),
        ("train.eval_tasks", "eval.tasks"),
        ("train.peak_flops", "log.peak_flops"),
    ],
)
def test_a_moved_key_names_its_new_place(old, new, tmp_path):
    with pytest.raises(ConfigError) as info:
        apply_overrides(PRESETS["tiny"], {old: "1"}, from_text=True)
    section, name = new.split(".")
    assert str(info.value) == (
        f"Config key {old!r} moved to {new!r}. Use --set {new}=..., or in a TOML file "
        f"[{section}] {name} = ... in place of {old}."
    )
    old_section, old_name = old.split(".")
    (tmp_path / "old.toml").write_text(f"[{old_section}]\n{old_name} = 1\n")
    with pytest.raises(ConfigError, match=f"moved to {new!r}"):
        load_config(str(tmp_path / "old.toml"))


def test_a_run_folders_config_toml_reads_moved_keys_in_their_new_place(tmp_path):
    # Runs made before the keys moved keep working: gpt wrote that file, not the user.
    (tmp_path / "config.toml").write_text(
        '[train]\ninit_from = "/runs/base"\npeak_flops = 1e12\neval_tasks = "t.jsonl"\n'
    )
    cfg = load_config(str(tmp_path / "config.toml"), run_folder=True)
    assert (cfg.init.source, cfg.log.peak_flops, cfg.eval.tasks) == ("/runs/base", 1e12, "t.jsonl")
