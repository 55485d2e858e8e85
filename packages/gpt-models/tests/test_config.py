import dataclasses

import pytest

from gpt_models import PRESETS, ConfigError, load_config
from gpt_models._config import apply_overrides, dumps, loads, parse_set, valid_keys, validate
from gpt_models._model import param_count


def test_presets_exist_and_validate():
    assert {"tiny", "gpt2-small", "gpt2-medium"} <= set(PRESETS)
    for cfg in PRESETS.values():
        assert validate(cfg) == cfg


def test_gpt2_small_is_124m_with_tied_embeddings():
    cfg = PRESETS["gpt2-small"].model
    assert cfg.tie_embeddings and (cfg.d_model, cfg.n_layers, cfg.n_heads) == (768, 12, 12)
    assert round(param_count(cfg) / 1e6) == 124


def test_design_keys_exist():
    keys = set(valid_keys())
    wanted = [
        "model.vocab_size",
        "model.seq_len",
        "model.d_model",
        "model.n_layers",
        "model.n_heads",
        "model.n_kv_heads",
        "model.mlp",
        "model.norm",
        "model.pos",
        "model.tie_embeddings",
        "model.dtype",
        "train.steps",
        "train.batch_size",
        "train.lr",
        "train.warmup_steps",
        "train.grad_accum",
        "train.eval_every",
        "train.checkpoint_every",
        "train.keep_checkpoints",
        "train.seed",
        "data.path",
        "data.val_fraction",
        "mesh.data",
        "mesh.fsdp",
        "mesh.tensor",
        "log.wandb",
    ]
    assert set(wanted) <= keys


def test_toml_round_trip_all_presets():
    for cfg in PRESETS.values():
        assert loads(dumps(cfg)) == cfg
    odd = apply_overrides(PRESETS["tiny"], {"sample.prompt": 'quote " and \\ and é\n'})
    assert loads(dumps(odd)) == odd


def test_overrides_parse_by_type():
    cfg = apply_overrides(
        PRESETS["tiny"],
        parse_set(["model.d_model=256", "train.lr=1e-3", "model.qk_norm=false", "train.steps=1_000",
                   "model.mlp=swiglu", "data.path=a=b.txt"]),
        from_text=True,
    )  # fmt: skip
    assert (cfg.model.d_model, cfg.train.lr, cfg.model.qk_norm) == (256, 1e-3, False)
    assert (cfg.train.steps, cfg.model.mlp, cfg.data.path) == (1000, "swiglu", "a=b.txt")


def test_unknown_key_suggests_and_lists():
    with pytest.raises(ConfigError) as info:
        apply_overrides(PRESETS["tiny"], {"model.d_modle": "3"}, from_text=True)
    text = str(info.value)
    assert "Unknown config key 'model.d_modle'" in text
    assert "Did you mean 'model.d_model'?" in text
    assert "'model.n_layers'" in text  # lists the valid keys of the section


def test_unknown_section_lists_sections():
    with pytest.raises(ConfigError, match=r"Valid sections: 'data', 'log', 'mesh', 'model'"):
        apply_overrides(PRESETS["tiny"], {"modle.x": "3"}, from_text=True)


def test_bad_value_names_expected_type():
    with pytest.raises(ConfigError, match=r"model.d_model got 'big', expected an integer"):
        apply_overrides(PRESETS["tiny"], {"model.d_model": "big"}, from_text=True)
    with pytest.raises(ConfigError, match=r"train.steps got True, expected an integer"):
        apply_overrides(PRESETS["tiny"], {"train.steps": True})
    with pytest.raises(ConfigError, match=r"model.qk_norm got 'maybe', expected true or false"):
        apply_overrides(PRESETS["tiny"], {"model.qk_norm": "maybe"}, from_text=True)


def test_bad_choice_lists_choices():
    with pytest.raises(ConfigError) as info:
        apply_overrides(PRESETS["tiny"], {"model.mlp": "swiglue"}, from_text=True)
    text = str(info.value)
    assert "expected one of 'gelu', 'relu2', 'swiglu'" in text and "Did you mean 'swiglu'?" in text


def test_every_problem_reported_at_once():
    with pytest.raises(ConfigError) as info:
        apply_overrides(PRESETS["tiny"], {"model.x": 1, "train.lr": "fast"}, from_text=True)
    assert "2 problems" in str(info.value)


def test_validate_reports_inconsistent_values():
    bad = dataclasses.replace(
        PRESETS["tiny"],
        model=dataclasses.replace(PRESETS["tiny"].model, d_model=130, n_kv_heads=3),
        train=dataclasses.replace(PRESETS["tiny"].train, batch_size=10, grad_accum=4),
    )
    with pytest.raises(ConfigError) as info:
        validate(bad)
    text = str(info.value)
    assert "model.d_model = 130 must be divisible by model.n_heads = 4" in text
    assert "model.n_kv_heads = 3 must divide model.n_heads = 4" in text
    assert "train.batch_size = 10 must be divisible by train.grad_accum = 4" in text


def test_validate_checks_the_sample_section_and_skips_rope_on_bad_heads():
    tiny = PRESETS["tiny"]
    sample = dataclasses.replace(tiny.sample, temperature=-0.5, top_k=-1, top_p=2.0)
    model = dataclasses.replace(tiny.model, n_heads=5, pos="rope")
    with pytest.raises(ConfigError) as info:
        validate(dataclasses.replace(tiny, sample=sample, model=model))
    text = str(info.value)
    assert "sample.temperature = -0.5 must be a finite number >= 0 (0 is greedy)" in text
    assert (
        "sample.top_k = -1 must be >= 0" in text and "sample.top_p = 2.0 must be in (0, 1]" in text
    )
    assert "must be divisible by model.n_heads = 5" in text and "RoPE" not in text


def test_parse_set_requires_equals():
    with pytest.raises(ConfigError, match=r"--set expects KEY=VALUE, got 'model.d_model'"):
        parse_set(["model.d_model"])


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
