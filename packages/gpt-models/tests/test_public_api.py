import gpt_models

EXPECTED = {
    "BPETokenizer",
    "Block",
    "ByteTokenizer",
    "CheckpointWarning",
    "Checkpointer",
    "Config",
    "ConfigError",
    "DataConfig",
    "DataError",
    "DataSource",
    "EvalConfig",
    "InitConfig",
    "GPT",
    "LogConfig",
    "MeshConfig",
    "PEAK_FLOPS",
    "ModelConfig",
    "PRESETS",
    "Run",
    "RunInUseError",
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
    "peak_flops",
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
    "train_loss",
}
# Run folders, data batches, plotting and the CLI as a function.
EXPECTED |= {
    "Dataset",
    "RunResult",
    "resolve_run",
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
# CPU throughput: the host allocator tuning `gpt train` does, for your own scripts.
EXPECTED |= {"await_scratch", "keep_host_memory", "tune_host_allocator"}
# Evals: bits per byte of text files, multiple-choice and cloze task accuracy.
EXPECTED |= {"TaskScore", "TextScore", "evaluate_task", "evaluate_text"}
# Corpora larger than memory: gpt prepare as a function.
EXPECTED |= {"PrepareResult", "prepare"}
# Real checkpoints: Hugging Face GPT-2 / Llama folders in and out.
EXPECTED |= {"CheckpointFormatError", "export_hf", "import_hf"}
# Fine-tuning with LoRA: its config section and the PEFT adapter export.
EXPECTED |= {"LoRAConfig", "export_adapter"}
# Preference tuning (DPO, IPO, SimPO): its config section.
EXPECTED |= {"PreferenceConfig"}

# Know before spending: the memory pre-flight and the typed errors.
EXPECTED |= {"DiskFullError", "OutOfMemoryError", "Plan", "plan_training"}
# The field's harness: lm-evaluation-harness tasks on any run (the gpt-models[lm-eval] extra).
EXPECTED |= {"HarnessScore", "evaluate_lm_eval", "register_lm_eval_model"}


def test_exported_names_are_pinned():
    # `internal` is a submodule, an attribute once anything imported it: not API (its docstring).
    public = {n for n in dir(gpt_models) if not n.startswith("_")} - {"internal"}
    assert public == EXPECTED


def test_internals_are_not_imported_with_the_package():
    import subprocess
    import sys

    code = "import sys, gpt_models; print('gpt_models.internal' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_each_name_has_one_home():
    for name in EXPECTED:
        obj = getattr(gpt_models, name)
        module = getattr(obj, "__module__", "gpt_models._")
        assert module.startswith("gpt_models._") or name in ("PRESETS", "RULES"), (name, module)
