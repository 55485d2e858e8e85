"""`model.attention`: the GPT's logits agree across cores; a core the backend lacks exits 2."""

import dataclasses

import jax
import numpy as np
import pytest

from gpt_models import forward, init_params


@pytest.mark.parametrize("n_kv_heads", [0, 1], ids=["MHA", "MQA"])
def test_xla_core_gives_the_logits_of_the_blocked_one(make_config, n_kv_heads):
    model = {"n_layers": 1, "n_kv_heads": n_kv_heads, "pos": "rope", "dtype": "float32"}
    cfg = make_config(model=model).model  # float32 also on GPU (auto would be bfloat16 there)
    params = init_params(cfg, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (2, cfg.seq_len), 0, cfg.vocab_size)
    logits = {
        impl: forward(params, tokens, dataclasses.replace(cfg, attention=impl))
        for impl in ("blocked", "xla")
    }
    np.testing.assert_allclose(logits["xla"], logits["blocked"], atol=2e-5, rtol=1e-5)


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="cudnn is refused only off GPU")
def test_cudnn_off_gpu_exits_2_before_the_run(tmp_path, capsys, gpt_train):
    assert gpt_train("--set", "model.attention=cudnn") == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "model.attention = 'cudnn' is NVIDIA's fused attention kernel, which runs on GPUs" in err
    assert "--set model.attention=auto" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()
