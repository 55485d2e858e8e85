import gpt_models

EXPECTED = {
    "Block",
    "ByteTokenizer",
    "CheckpointWarning",
    "Checkpointer",
    "Config",
    "ConfigError",
    "DataConfig",
    "DataError",
    "GPT",
    "LogConfig",
    "MeshConfig",
    "ModelConfig",
    "PRESETS",
    "RULES",
    "SampleConfig",
    "TrainConfig",
    "TrainState",
    "TrainingDivergedError",
    "UsageError",
    "abstract_params",
    "abstract_state",
    "compile_eval_step",
    "compile_train_step",
    "compute_dtype",
    "default_corpus",
    "flops_per_token",
    "forward",
    "from_items",
    "generate",
    "gpt",
    "init_params",
    "init_state",
    "load_config",
    "loss_fn",
    "main",
    "make_mesh",
    "make_optimizer",
    "make_schedule",
    "muon_dimension_numbers",
    "param_count",
    "param_specs",
    "sample_token",
    "to_items",
    "train",
}


def test_exported_names_are_pinned():
    public = {n for n in dir(gpt_models) if not n.startswith("_")}
    assert public == EXPECTED


def test_each_name_has_one_home():
    for name in EXPECTED:
        obj = getattr(gpt_models, name)
        module = getattr(obj, "__module__", "gpt_models._")
        assert module.startswith("gpt_models._") or name in ("PRESETS", "RULES"), (name, module)
