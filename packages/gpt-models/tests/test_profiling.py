"""`gpt train --profile START:STOP` and the step-time split on the progress line."""

import gzip
import json
import re

import pytest

FAST = ["--set", "model.n_layers=1", "--set", "train.steps=4", "--set", "train.eval_every=4",
        "--set", "train.checkpoint_every=4", "--set", "log.every=1"]  # fmt: skip


def test_profile_traces_the_steps_into_the_run_folder(tmp_path, capsys, gpt_train):
    assert gpt_train(*FAST, "--profile", "2:4") == 0
    err = capsys.readouterr().err
    profile = tmp_path / "run" / "profile"
    assert f"Profile of steps 3..4 written to {profile}" in err
    assert len(list(profile.glob("plugins/profile/*/*.xplane.pb"))) == 1  # TensorBoard's Profile
    (perfetto,) = profile.glob("plugins/profile/*/*perfetto_trace.json.gz")
    events = json.loads(gzip.decompress(perfetto.read_bytes()))["traceEvents"]
    assert any(e.get("dur", 0) > 0 for e in events)  # timed events Perfetto can show
    # The split of the host's time per step, from step 3 on (steps 1-2 compile and warm up).
    split = re.findall(r"compute (\d+)% data (\d+)% log (\d+)%", err)
    assert split and all(sum(map(int, parts)) in (99, 100, 101) for parts in split)


@pytest.mark.parametrize(
    ("flag", "says"),
    [
        ("4:2", "expected START:STOP, two step counts with 0 <= START < STOP"),
        ("a:b", "got 'a:b'; e.g. --profile 2:5"),
        ("3", "got '3'"),
    ],
)
def test_malformed_profile_range_is_a_usage_error(tmp_path, capsys, gpt_train, flag, says):
    with pytest.raises(SystemExit) as exit_:  # argparse: usage line, message, status 2
        gpt_train("--profile", flag)
    assert exit_.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "argument --profile: expected START:STOP" in err and says in err
    assert not (tmp_path / "run").exists()


def test_profile_range_past_the_run_exits_2_before_the_run(tmp_path, capsys, gpt_train):
    assert gpt_train("--profile", "2:99") == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (
        "--profile 2:99 is not a range of this run's steps: expected START:STOP with 0 <= START "
        "< STOP <= train.steps (6)" in err
    )
    assert "Traceback" not in err and not (tmp_path / "run").exists()
