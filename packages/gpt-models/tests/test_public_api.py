import gpt_models

EXPECTED = {
    "BPETokenizer",
    "ByteTokenizer",
    "Config",
    "ConfigError",
    "DataConfig",
    "DataError",
    "GPT",
    "LogConfig",
    "MeshConfig",
    "PEAK_FLOPS",
    "ModelConfig",
    "PRESETS",
    "RunInUseError",
    "SampleConfig",
    "TrainConfig",
    "TrainingDivergedError",
    "UsageError",
    "default_corpus",
    "forward",
    "generate",
    "init_params",
    "load_config",
    "peak_flops",
    "train",
}
# The loop's layout (issue 12): run folders, data batches, plotting and the CLI as a function.
EXPECTED |= {
    "Dataset",
    "RunResult",
    "TrainingInterrupted",
    "apply_overrides",
    "eval_batches",
    "load_dataset",
    "load_run",
    "main",
    "peak_flops",
    "plot_losses",
    "train_batch",
}


def test_exported_names_are_pinned():
    public = {n for n in dir(gpt_models) if not n.startswith("_")}
    assert public == EXPECTED


def test_each_name_has_one_home():
    for name in EXPECTED:
        obj = getattr(gpt_models, name)
        module = getattr(obj, "__module__", "gpt_models._")
        assert module.startswith("gpt_models._") or name == "PRESETS", (name, module)
