"""DPO on a tiny imported Llama: the exported policy against its base on held-out pairs, in torch.

A tiny ``LlamaForCausalLM`` (random weights, 256 ids: the byte tokenizer's) is built by
transformers and saved; arithmetic pairs (``"a+b="``, chosen the sum, rejected the sum plus one
or minus one) are split into a training JSONL and held-out pairs generated the same way. ``gpt
prepare`` and ``gpt train --init-from`` the folder with ``preference.loss = dpo`` (once with the
reference in each step, once with ``precompute_ref``), then ``gpt export``. In torch, the
exported policy and the saved base score each held-out answer (the summed log-prob of its bytes
and the end-of-text id, after the prompt's bytes), and the implicit reward
``beta * (log pi - log ref)`` of the chosen answer is compared with the rejected one's.

Needs torch and transformers (``nox -s interop`` installs them).
``python benchmarks/preference/run.py [--steps 60] [--work DIR]``; prints markdown.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import statistics
import tempfile
from pathlib import Path

import numpy as np

from gpt_models import main

BETA = 0.1


def pairs(rng: np.random.Generator) -> tuple[list[dict], list[dict]]:
    """Training and held-out pairs, disjoint by their prompt."""
    out = []
    for a in range(20):
        for b in range(20):
            wrong = a + b + (1 if rng.random() < 0.5 else -1)
            out.append({"prompt": f"{a}+{b}=", "chosen": str(a + b), "rejected": str(wrong)})
    rng.shuffle(out)
    return out[:320], out[320:]


def base_folder(folder: Path) -> Path:
    import torch
    import transformers

    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=32)  # fmt: skip
    config.architectures = ["LlamaForCausalLM"]
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def answer_logps(model, records: list[dict]) -> np.ndarray:
    """``(n, 2)``: each pair's chosen and rejected summed log-prob, as the byte store counts it."""
    import torch

    out = np.zeros((len(records), 2))
    for i, r in enumerate(records):
        for j, answer in enumerate((r["chosen"], r["rejected"])):
            prompt = list(r["prompt"].encode())
            ids = prompt + list(answer.encode()) + [0]  # the byte tokenizer's end-of-text: 0
            with torch.no_grad():
                logits = model(torch.tensor([ids[:-1]])).logits[0].double()
            logp = torch.log_softmax(logits, -1)[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]
            out[i, j] = float(logp[len(prompt) - 1 :].sum())
    return out


def train(work: Path, store: Path, base: Path, name: str, steps: int, *more: str) -> Path:
    args = ["train", "--init-from", str(base), "--out", str(work), "--name", name,
            "--set", f"data.path={store}", "--set", "preference.loss=dpo",
            "--set", f"preference.beta={BETA}", "--set", f"train.steps={steps}",
            "--set", "train.batch_size=16", "--set", "train.warmup_steps=0",
            "--set", "train.lr=3e-3", "--set", f"train.eval_every={steps}",
            "--set", "train.eval_batches=2", "--set", f"train.checkpoint_every={steps}",
            "--set", "sample.max_new_tokens=1", "--set", "mesh.data=-1", *more]  # fmt: skip
    assert main(args) == 0, name
    return work / name


def rows(run: Path) -> list[dict]:
    with open(run / "metrics.csv") as f:
        return list(csv.DictReader(f))


def step_seconds(run: Path) -> float:
    """The median wall time between consecutive logged steps, the first two left out."""
    r = [x for x in rows(run) if x.get("wall_time")]
    gaps = [
        (float(b["wall_time"]) - float(a["wall_time"])) / (int(b["step"]) - int(a["step"]))
        for a, b in itertools.pairwise(r[2:])
    ]
    return statistics.median(gaps)


def main_() -> None:
    import transformers

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--work", type=Path)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp())
    train_pairs, held = pairs(np.random.default_rng(0))
    src = work / "pairs.jsonl"
    src.write_text("".join(json.dumps(p) + "\n" for p in train_pairs))
    store = work / "store"
    assert main(["prepare", str(src), "--out", str(store), "--val-fraction", "0.1"]) == 0
    base = base_folder(work / "base")
    dpo = train(work, store, base, "dpo", args.steps)
    pre = train(work, store, base, "pre", args.steps, "--set", "preference.precompute_ref=true")
    assert main(["export", str(dpo), str(work / "policy")]) == 0
    ref = answer_logps(transformers.AutoModelForCausalLM.from_pretrained(base).eval(), held)
    pol = transformers.AutoModelForCausalLM.from_pretrained(work / "policy").eval()
    rewards = BETA * (answer_logps(pol, held) - ref)
    margin = rewards[:, 0] - rewards[:, 1]
    print(f"held-out pairs: {len(held)}; implicit-reward accuracy {np.mean(margin > 0):.3f}, "
          f"mean margin {margin.mean():.4f} (beta {BETA}, torch, exported policy vs base)")  # fmt: skip
    keys = ["step", "loss", "rewards/chosen", "rewards/rejected", "rewards/margins",
            "rewards/accuracies", "logps/chosen", "logps/rejected", "val_loss",
            "val_rewards/accuracies"]  # fmt: skip
    table = rows(dpo)
    print("| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for r in (table[0], table[-1]):
        print("| " + " | ".join(r.get(k, "") or "" for k in keys) + " |")
    a, b = step_seconds(dpo), step_seconds(pre)
    print(f"step time: reference in the step {a * 1e3:.0f} ms, precomputed {b * 1e3:.0f} ms "
          f"({a / b:.2f}x)")  # fmt: skip


if __name__ == "__main__":
    main_()
