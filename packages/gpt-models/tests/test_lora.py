"""LoRA fine-tuning: the [lora] section, adapters-only training, resume, and the two exports.

The peft parity test at the end needs torch + transformers + peft (the ``interop`` nox session
installs them); elsewhere it skips.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpt_models import (
    PRESETS,
    CheckpointFormatError,
    ConfigError,
    LoRAConfig,
    UsageError,
    abstract_state,
    export_adapter,
    export_hf,
    forward,
    gpt,
    import_hf,
    init_params,
    load_run,
    loss_fn,
    main,
    make_mesh,
    make_optimizer,
    train,
)

SMALL = {"seq_len": 32, "d_model": 32, "n_layers": 2, "n_heads": 2, "vocab_size": 320,
         "vocab_real": 300}  # fmt: skip
LLAMA = {**SMALL, "n_kv_heads": 1, "d_ff": 64}
TRAIN = ["--set", "train.batch_size=8", "--set", "train.eval_batches=1", "--set",
         "sample.max_new_tokens=4", "--set", "train.warmup_steps=1", "--set",
         "train.checkpoint_every=3", "--set", "train.eval_every=3"]  # fmt: skip


def _model(preset: str, **changes):
    shape = {**(LLAMA if "llama" in preset else SMALL), **changes}
    return dataclasses.replace(PRESETS[preset].model, **shape)


def _lora_config(preset: str, **lora) -> object:
    cfg = dataclasses.replace(PRESETS[preset], model=_model(preset))
    return dataclasses.replace(cfg, lora=LoRAConfig(**lora))


def _with_random_adapters(params, seed: int = 5):
    """Adapters as after training (lora_b no longer zero), the rest as it is."""
    keys = iter(jax.random.split(jax.random.key(seed), len(params)))
    return type(params)({
        path: p.replace(value=0.2 * jax.random.normal(next(keys), p.shape, p.dtype))
        if "lora_" in path[-1] else p
        for path, p in params.items()
    }).locked()  # fmt: skip


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A Llama-shaped Hugging Face folder whose vocabulary holds the byte tokenizer's ids."""
    m = _model("llama-tiny")
    return export_hf(m, init_params(m, jax.random.key(3)), tmp_path_factory.mktemp("src") / "hf")


@pytest.fixture(scope="module")
def lora_run(source, tmp_path_factory) -> Path:
    """A LoRA run of 6 steps from ``source`` at a high rate, so that the adapters moved: the
    finetune-lora preset with its [lora] keys changed."""
    out = tmp_path_factory.mktemp("runs")
    args = ["train", "--config", "finetune-lora", "--init-from", str(source), "--out", str(out),
            "--name", "ft", *TRAIN,
            "--set", "train.steps=6", "--set", "train.lr=3e-2", "--set", "lora.rank=4",
            "--set", "lora.alpha=8", "--set", "lora.targets=q,v,o,down"]  # fmt: skip
    assert main(args) == 0
    return out / "ft"


# --- the [lora] section ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"rank": -1}, "lora.rank = -1 must be >= 0: 0 turns LoRA off"),
        ({"rank": 8, "alpha": -2.0}, "lora.alpha = -2.0 must be a finite number >= 0"),
        ({"rank": 8, "dropout": 1.0}, "lora.dropout = 1.0 must be in [0, 1)"),
        ({"rank": 8, "targets": "q,qq"}, "lora.targets names 'qq', which is no projection; "
         "valid targets: q, k, v, o, gate, up, down, attn, mlp, comma-separated (e.g. 'q,v'). "
         "Did you mean 'q'?"),
        ({"rank": 8, "targets": " , "}, "lora.targets = ' , ' names no projection"),
        ({"rank": 8, "targets": "gate"}, "lora.targets names 'gate', but model.mlp = 'relu2' has "
         "no gate projection (only swiglu and geglu do)"),
        ({"rank": 64}, "lora.rank = 64 is larger than the projection(s) q, v allow: the rank must "
         "be at most the smaller of a projection's input and output sizes, here 32. Lower it, "
         "e.g. --set lora.rank=8"),
    ],
)  # fmt: skip
def test_lora_section_errors_say_what_and_how(changes, message):
    tiny = PRESETS["tiny"]
    with pytest.raises(ConfigError) as err:
        dataclasses.replace(tiny, model=_model("tiny"), lora=LoRAConfig(**changes))
    assert message in str(err.value)


def test_lora_with_muon_is_refused():
    tiny = PRESETS["tiny"]
    with pytest.raises(ConfigError, match="Use --set train.optimizer=adamw with LoRA"):
        dataclasses.replace(tiny, train=dataclasses.replace(tiny.train, optimizer="muon"),
                            lora=LoRAConfig(rank=4))  # fmt: skip


def test_config_show_has_the_lora_section_and_set_reaches_it(capsys):
    assert main(["config", "show", "--set", "lora.rank=8", "--set", "lora.targets=attn"]) == 0
    shown = capsys.readouterr().out
    # tiny: 4 layers of q, k, v and o adapters (attn), each (128 x 8) + (8 x 128)
    assert "M parameters + 32,768 in LoRA adapters (trained)" in shown
    section = shown.partition("[lora]\n")[2]
    assert section.startswith("rank = 8  # the adapters' inner size r (0 = no LoRA")
    assert 'targets = "attn"  # the projections to adapt' in section
    assert main(["config", "show", "--set", "lora.targets=q,vv"]) == 2
    err = capsys.readouterr().err  # the config's problems, listed as every config error is
    assert err.startswith("gpt: error: Invalid config (1 problem):\n  - lora.targets names 'vv'")
    assert err.rstrip().endswith("Did you mean 'v'?") and "Traceback" not in err


def test_targets_pick_the_named_kernels_only():
    cfg = _lora_config("llama-tiny", rank=4, targets="k,mlp")
    adapted = sorted(
        {path[-2:] for path in init_params(cfg, jax.random.key(0)) if "lora" in path[-1]}
    )
    assert adapted == [
        ("attn", "key_lora_a"), ("attn", "key_lora_b"), ("gate_0", "lora_a"), ("gate_0", "lora_b"),
        ("linear_0", "lora_a"), ("linear_0", "lora_b"), ("linear_1", "lora_a"),
        ("linear_1", "lora_b"),
    ]  # fmt: skip


# --- training ----------------------------------------------------------------------------------


def test_only_the_adapters_train_and_only_they_have_optimizer_state(lora_run, source, capsys):
    cfg, params, step = load_run(lora_run)
    _, base = import_hf(source)
    assert step == 6
    for path in base:  # the base weights bit for bit
        assert np.array_equal(np.asarray(params[path].value), np.asarray(base[path].value)), path
    adapters = {p: v for p, v in params.items() if "lora" in p[-1]}
    assert len(adapters) == 2 * 4  # a and b of q, v, o, down (each stacked over the layers)
    assert all(v.trainable for v in adapters.values())
    assert all(np.any(np.asarray(v.value)) for v in adapters.values())  # lora_b left zero
    # Adam's two moments for the adapters alone: the optimizer state is not model-sized.
    state = abstract_state(cfg, make_optimizer(cfg.train), make_mesh(cfg.mesh, jax.devices()[:1]))
    adapter_values = sum(v.value.size for v in adapters.values())
    opt_values = sum(a.size for a in jax.tree.leaves(state.opt_state) if a.ndim)
    assert opt_values == 2 * adapter_values


def test_init_from_a_lora_run_starts_at_its_merged_weights(lora_run, tmp_path):
    args = ["train", "--init-from", str(lora_run), "--out", str(tmp_path), "--name", "again",
            *TRAIN, "--set", "train.steps=1", "--set", "lora.rank=2", "--set", "lora.targets=k"]  # fmt: skip
    assert main(args) == 0
    source_cfg, source, _ = load_run(lora_run)
    merged = gpt(source_cfg).lora.merge(source)
    _, params, _ = load_run(tmp_path / "again")
    assert sorted({p[-1] for p in params if "lora" in p[-1]}) == ["key_lora_a", "key_lora_b"]
    for path in merged:  # the new run's frozen weights: the source's with its adapters merged
        assert np.array_equal(np.asarray(params[path].value), np.asarray(merged[path].value)), path


def test_lora_sft_on_packed_chat_examples_trains_the_adapters_only(tmp_path):
    """The fine-tune practitioners run: chat examples packed into rows, the loss on the answers,
    LoRA on the MLP with dropout (the MLP is told it trains), two micro-batches per step."""
    m = _model("llama-tiny", seq_len=64)  # rows that hold two or three examples
    source = export_hf(m, init_params(m, jax.random.key(3)), tmp_path / "src")
    chats = [[{"role": "user", "content": f"What is {i} plus two?"},
              {"role": "assistant", "content": f"It is {i + 2}."}] for i in range(120)]  # fmt: skip
    jsonl = tmp_path / "chat.jsonl"
    jsonl.write_text("".join(json.dumps({"messages": c}) + "\n" for c in chats))
    store = tmp_path / "store"
    assert main(["prepare", str(jsonl), "--out", str(store), "--val-fraction", "0.2"]) == 0
    args = ["train", "--config", "finetune-lora", "--init-from", str(source), "--out",
            str(tmp_path), "--name", "sft", *TRAIN, "--set", f"data.path={store}", "--set",
            "train.steps=4", "--set", "train.batch_size=16", "--set", "train.grad_accum=2",
            "--set", "lora.targets=mlp", "--set", "lora.dropout=0.1", "--set", "train.lr=1e-2"]  # fmt: skip
    assert main(args) == 0
    _, params, _ = load_run(tmp_path / "sft")
    _, base = import_hf(source)
    assert all(np.array_equal(np.asarray(params[p].value), np.asarray(base[p].value)) for p in base)
    moved = [p[-2:] for p in params if p[-1] == "lora_b" and np.any(np.asarray(params[p].value))]
    assert sorted(moved) == [("gate_0", "lora_b"), ("linear_0", "lora_b"), ("linear_1", "lora_b")]


def test_launch_says_trainable_and_total_parameters(source, tmp_path, capsys):
    args = ["train", "--init-from", str(source), "--out", str(tmp_path), "--name", "ft", *TRAIN,
            "--set", "train.steps=1", "--set", "lora.rank=2", "--dry-run"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    found = re.search(r"trainable +([0-9,]+) \(.*\): the LoRA adapters, rank 2 \(alpha 2\) on q,v",
                      out)  # fmt: skip
    assert found, out
    # Two layers of q (32 -> 2 -> 32) and v (32 -> 2 -> 16: one kv head of 16).
    assert int(found.group(1).replace(",", "")) == 2 * (32 * 2 + 2 * 32 + 32 * 2 + 2 * 16)


def test_resumed_lora_run_equals_the_uninterrupted_one(tmp_path):
    cfg = _lora_config("tiny", rank=4, dropout=0.1, targets="q,v")  # dropout masks resume too
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(
        cfg.train, steps=4, batch_size=8, warmup_steps=1, eval_batches=1, eval_every=2,
        checkpoint_every=2, lr=1e-2), model=dataclasses.replace(cfg.model, vocab_size=256,
        vocab_real=0))  # fmt: skip
    train(cfg, tmp_path / "whole", stream=io.StringIO(), write_sample=False)
    short = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, steps=2))
    train(short, tmp_path / "split", stream=io.StringIO(), write_sample=False)
    train(cfg, tmp_path / "split", resume=True, stream=io.StringIO(), write_sample=False)
    _, whole, _ = load_run(tmp_path / "whole")
    _, split, _ = load_run(tmp_path / "split")
    for path in whole:
        assert np.array_equal(np.asarray(whole[path].value), np.asarray(split[path].value)), path


def test_lora_dropout_drops_in_training_only():
    """lora.dropout alone (model.dropout = 0) makes a training loss draw masks; eval never does."""
    cfg = _lora_config("tiny", rank=4, dropout=0.5, targets="q,v")
    params = _with_random_adapters(init_params(cfg, jax.random.key(0)))
    batch = jax.random.randint(jax.random.key(1), (2, 17), 0, 300)
    plain = float(loss_fn(params, batch, cfg))
    keyed = [float(loss_fn(params, batch, cfg, dropout_key=jax.random.key(k))) for k in (0, 0, 1)]
    assert keyed[0] == keyed[1] != keyed[2] and plain not in keyed
    no_drop = dataclasses.replace(cfg, lora=dataclasses.replace(cfg.lora, dropout=0.0))
    assert float(loss_fn(params, batch, no_drop, dropout_key=jax.random.key(0))) == plain


def test_resume_refuses_a_changed_lora_shape(lora_run, capsys, error_line):
    args = ["train", "--resume", str(lora_run), "--set", "lora.rank=8"]
    assert main(args) == 2
    assert error_line(capsys.readouterr().err) == (
        f"gpt: error: gpt train --resume {lora_run} --set lora.rank=8: a resumed run keeps its "
        "LoRA adapters, and this run has lora.rank = 4; its checkpoints hold adapters of that "
        f"shape. Drop that --set, or start a new run from this one's weights with --init-from "
        f"{lora_run} --set lora.rank=... (the adapters are merged into the weights it starts from)."
    )


# --- sample, eval and the merged export -----------------------------------------------------------


def test_eval_and_sample_use_the_adapters_as_the_merged_export_does(lora_run, source, tmp_path,
                                                                     capsys):  # fmt: skip
    assert main(["export", str(lora_run), str(tmp_path / "merged")]) == 0
    assert "LoRA adapters (rank 4 (alpha 8) on q,v,o,down) are merged" in capsys.readouterr().err
    assert main(["import", str(tmp_path / "merged"), "--name", "m", "--out", str(tmp_path)]) == 0
    text = tmp_path / "t.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 4)
    results = {}
    for name, run in (("lora", lora_run), ("merged", tmp_path / "m"), ("base", None)):
        if run is None:
            assert main(["import", str(source), "--name", "b", "--out", str(tmp_path)]) == 0
            run = tmp_path / "b"
        capsys.readouterr()
        assert main(["eval", "--run", str(run), "--text", str(text)]) == 0
        nats = float(re.search(r"nats_per_token ([0-9.]+)", capsys.readouterr().out).group(1))
        assert main(["sample", "--run", str(run), "--prompt", "The ", "--temperature", "0",
                     "--max-new-tokens", "12"]) == 0  # fmt: skip
        results[name] = (nats, capsys.readouterr().out)
    assert results["lora"][0] == pytest.approx(results["merged"][0], abs=1e-4)
    assert results["lora"][1] == results["merged"][1]
    assert abs(results["lora"][0] - results["base"][0]) > 1e-3  # the adapters do matter


@pytest.mark.parametrize("preset", ["llama-tiny", "gpt2-small"])
def test_merged_export_gives_the_adapted_logits(preset, tmp_path):
    cfg = _lora_config(preset, rank=4, alpha=8.0, targets="q,k,v,o,mlp")
    params = _with_random_adapters(init_params(cfg, jax.random.key(0)))
    export_hf(cfg, params, tmp_path / "merged")
    plain_cfg, plain = import_hf(tmp_path / "merged")
    tokens = jax.random.randint(jax.random.key(1), (2, 16), 0, 300)
    adapted = np.asarray(forward(params, tokens, cfg))[..., :300]
    merged = np.asarray(forward(plain, tokens, plain_cfg))[..., :300]
    base = np.asarray(forward(params, tokens, cfg.model.base))[..., :300]  # the adapters left out
    assert np.abs(adapted - base).max() > 1e-2
    np.testing.assert_allclose(merged, adapted, atol=2e-5, rtol=0)


def test_export_hf_refuses_adapters_without_their_config(tmp_path):
    cfg = _lora_config("llama-tiny", rank=2)
    params = init_params(cfg, jax.random.key(0))
    with pytest.raises(CheckpointFormatError, match=r"params hold LoRA adapters \(\*lora_a, \*lora_b\), but "
                       "the config has no \\[lora\\] section"):  # fmt: skip
        export_hf(cfg.model.base, params, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --- the PEFT adapter export ------------------------------------------------------------------------


def _safetensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(path))


def test_adapter_export_files_names_and_shapes(lora_run, source, tmp_path, capsys):
    assert main(["export", str(lora_run), str(tmp_path / "adapter"), "--adapter"]) == 0
    assert "PeftModel.from_pretrained(" in capsys.readouterr().err
    out = tmp_path / "adapter"
    assert sorted(p.name for p in out.iterdir()) == ["adapter_config.json",
                                                      "adapter_model.safetensors"]  # fmt: skip
    config = json.loads((out / "adapter_config.json").read_text())
    cfg, _, _ = load_run(lora_run)
    assert {k: config[k] for k in ("peft_type", "task_type", "r", "lora_alpha", "lora_dropout",
                                   "target_modules", "rank_pattern", "fan_in_fan_out",
                                   "base_model_name_or_path")} == {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4, "lora_alpha": 8.0,
        "lora_dropout": 0.0, "target_modules": ["down_proj", "o_proj", "q_proj", "v_proj"],
        "rank_pattern": {}, "fan_in_fan_out": False, "base_model_name_or_path": str(source),
    }  # fmt: skip
    tensors = _safetensors(out / "adapter_model.safetensors")
    D, r, kv, F = 32, 4, 16, 64  # d_model, rank, kv heads x head dim, d_ff
    shapes = {"self_attn.q_proj": (D, D), "self_attn.v_proj": (kv, D),
              "self_attn.o_proj": (D, D), "mlp.down_proj": (D, F)}  # fmt: skip
    expected = {}
    for i in range(2):
        for module, (out_f, in_f) in shapes.items():
            name = f"base_model.model.model.layers.{i}.{module}"
            expected[f"{name}.lora_A.weight"] = (r, in_f)
            expected[f"{name}.lora_B.weight"] = (out_f, r)
    assert {k: v.shape for k, v in tensors.items()} == expected


@pytest.mark.parametrize(
    ("preset", "targets"), [("llama-tiny", "attn,mlp"), ("gpt2-small", "q,v,o,up,down"),
                            ("gpt2-small", "k")],
)  # fmt: skip
def test_adapter_times_scale_is_exactly_the_merged_update(preset, targets, tmp_path):
    """For every module of the adapter folder, peft's update scale * B @ A is the merged export's
    weight minus the base export's: GPT-2's fused c_attn included (rank_pattern)."""
    cfg = _lora_config(preset, rank=4, alpha=6.0, targets=targets)
    params = _with_random_adapters(init_params(cfg, jax.random.key(0)))
    export_adapter(cfg, params, tmp_path / "adapter")
    export_hf(cfg, params, tmp_path / "merged")
    base = params.split(lambda path, _: "lora" not in path[-1])[0]
    export_hf(cfg.model, base, tmp_path / "base")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    adapter = _safetensors(tmp_path / "adapter" / "adapter_model.safetensors")
    merged = _safetensors(tmp_path / "merged" / "model.safetensors")
    plain = _safetensors(tmp_path / "base" / "model.safetensors")
    modules = {k.removesuffix(".lora_A.weight") for k in adapter if k.endswith("lora_A.weight")}
    assert len(modules) == 2 * len(config["target_modules"])
    for module in modules:
        short = next(t for t in config["target_modules"] if module.endswith("." + t))
        scale = config["alpha_pattern"].get(short, config["lora_alpha"]) / config[
            "rank_pattern"].get(short, config["r"])  # fmt: skip
        delta = scale * adapter[f"{module}.lora_B.weight"] @ adapter[f"{module}.lora_A.weight"]
        weight = module.removeprefix("base_model.model.") + ".weight"
        if config["fan_in_fan_out"]:  # GPT-2's Conv1D stores (in, out)
            delta = delta.T
        np.testing.assert_allclose(merged[weight] - plain[weight], delta, atol=2e-6)
    if preset == "gpt2-small" and "q" in targets:  # q and v in one fused c_attn of rank 2r
        assert config["rank_pattern"] == {"c_attn": 8} and config["alpha_pattern"] == {
            "c_attn": 12.0
        }
        assert (
            "attn.c_proj" in config["target_modules"] and "mlp.c_proj" in config["target_modules"]
        )


def test_an_adapter_names_the_hugging_face_folder_its_base_came_from(source, tmp_path, capsys):
    """A LoRA run started from a run folder that ``gpt import`` made: ``base_model_name_or_path``
    is the Hugging Face folder imported (peft's AutoPeftModelForCausalLM loads the base from it;
    a run folder it cannot load). Where there is none, it is null and a note says why."""
    runs = tmp_path / "runs"
    assert main(["import", str(source), "--name", "imported", "--out", str(runs)]) == 0
    args = ["train", "--config", "finetune-lora", "--init-from", str(runs / "imported"), "--out",
            str(runs), "--name", "ft", *TRAIN, "--set", "train.steps=1", "--set", "lora.rank=2"]  # fmt: skip
    assert main(args) == 0
    capsys.readouterr()
    assert main(["export", str(runs / "ft"), str(tmp_path / "adapter"), "--adapter"]) == 0
    err = capsys.readouterr().err
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(source.resolve())
    assert (f"note: peft loads them onto {source.resolve()}, the Hugging Face folder "
            f"{runs / 'ft'} started from: AutoPeftModelForCausalLM.from_pretrained(") in err  # fmt: skip

    cfg, params, _ = load_run(runs / "ft")
    (runs / "imported" / "checkpoints" / "7").mkdir()  # as if trained since it was imported
    for init, why in [
        ("", "the run started from random weights (no init.source), so no Hugging Face model is "
             "its base"),
        (str(runs / "ft"), f"its base, init.source = {runs / 'ft'}, is a run folder that gpt "
                           "train made, not one imported from a Hugging Face folder"),
        (str(runs / "imported"), f"its base, init.source = {runs / 'imported'}, was imported "
                                 f"from {source.resolve()} but has been trained since, so its "
                                 "weights are no longer that folder's"),
    ]:  # fmt: skip
        out, notes = tmp_path / f"adapter-{len(init)}", io.StringIO()
        export_adapter(dataclasses.replace(cfg, init=dataclasses.replace(cfg.init, source=init)),
                       params, out, notes=notes)  # fmt: skip
        assert json.loads((out / "adapter_config.json").read_text())[
            "base_model_name_or_path"] is None  # fmt: skip
        assert notes.getvalue() == (
            f"note: {out}/adapter_config.json names no base_model_name_or_path: {why}. Load the "
            "adapters onto that run's export: gpt export BASE_RUN BASE_DIR, then PeftModel."
            f"from_pretrained(AutoModelForCausalLM.from_pretrained(BASE_DIR), {str(out)!r}).\n"
        )


def test_adapter_export_refuses_a_run_without_lora(tmp_path, capsys, error_line):
    m = _model("llama-tiny")
    params = init_params(m, jax.random.key(0))
    cfg = dataclasses.replace(PRESETS["llama-tiny"], model=m)
    with pytest.raises(UsageError) as err:
        export_adapter(cfg, params, tmp_path / "adapter")
    assert str(err.value) == (
        "gpt export --adapter writes LoRA adapters, but this run has none (lora.rank = 0: every "
        "weight was trained). Export the whole model without --adapter, or train adapters with "
        "--set lora.rank=8."
    )
    assert not (tmp_path / "adapter").exists()


def test_adapter_export_never_overwrites(lora_run, tmp_path, capsys, error_line):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "mine.txt").write_text("keep")
    assert main(["export", str(lora_run), str(tmp_path / "taken"), "--adapter"]) == 2
    assert "exists already (a folder)" in error_line(capsys.readouterr().err)
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["mine.txt"]


# --- peft itself (interop: torch + transformers + peft) -----------------------------------------


# peft and transformers warn about each other's deprecations (peft reads transformers'
# is_gradient_checkpointing): theirs, not ours.
@pytest.mark.interop
@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize(("preset", "targets"), [("llama-tiny", "attn,mlp"),
                                                 ("gpt2-small", "q,v,o,up")])  # fmt: skip
def test_peft_loads_the_adapter_onto_the_exported_base_with_our_logits(preset, targets, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    cfg = _lora_config(preset, rank=4, alpha=8.0, targets=targets)
    params = _with_random_adapters(init_params(cfg, jax.random.key(0)))
    export_adapter(cfg, params, tmp_path / "adapter")
    export_hf(cfg.model, params.split(lambda path, _: "lora" not in path[-1])[0], tmp_path / "base")
    base = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "base")
    model = peft.PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
    tokens = np.random.default_rng(0).integers(0, 300, (2, 16))
    with torch.no_grad():
        theirs = model(torch.tensor(tokens)).logits.float().numpy()
    ours = np.asarray(forward(params, jnp.asarray(tokens, jnp.int32), cfg))[..., :300]
    diff = float(np.abs(ours - theirs).max())
    print(f"{preset} peft logits max |diff| = {diff:.2e}")
    assert diff <= 1e-4


def test_a_mixture_of_experts_takes_adapters_on_the_attention_only():
    base = PRESETS["llama-tiny"]
    moe = dataclasses.replace(base.model, n_experts=4)
    with pytest.raises(ConfigError) as err:
        dataclasses.replace(base, model=moe, lora=LoRAConfig(rank=4, targets="attn,mlp"))
    assert "model.n_experts = 4: the experts take no adapters; target the attention" in str(
        err.value
    )
    dataclasses.replace(base, model=moe, lora=LoRAConfig(rank=4, targets="attn"))  # accepted
    with pytest.raises(ConfigError) as err:
        dataclasses.replace(base, model=dataclasses.replace(moe, experts_per_token=5, mlp="gelu"))
    assert "model.experts_per_token = 5 must be in 1..model.n_experts = 4" in str(err.value)
    assert "needs SwiGLU experts without biases: model.mlp = 'swiglu' (not 'gelu')" in str(
        err.value
    )
