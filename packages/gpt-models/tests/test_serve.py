"""``gpt serve``: a run answering over the OpenAI API, tested with the official ``openai`` client.

One server (the tiny imported GPT-2 of tests/data, with a chat template written into its run
folder) is started once for the module, in a subprocess, and every request test talks to it; the
drain on SIGTERM needs a server of its own (a longer context, one slot, no queue). The flag and
pre-flight refusals run in-process: they stop before a port is bound.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpt_models import main

openai = pytest.importorskip("openai", reason="the serve tests talk to it: the dev group has it")
pytest.importorskip("uvicorn", reason="gpt serve needs pip install 'gpt-models[serve]'")
pytest.importorskip("starlette", reason="gpt serve needs pip install 'gpt-models[serve]'")
httpx = pytest.importorskip("httpx")

DATA = Path(__file__).parent / "data"
KEY = "sk-test-key"
# A chat template of the test's own: the assistant's turn ends with "^", token 94 of the byte
# tokenizer (the tiny GPT-2 of tests/data emits it often, so greedy replies end).
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}"
    "{% if m['role'] == 'assistant' %}^{% endif %}{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
CHAT = {"template": TEMPLATE, "variables": {}, "template_file": "test_serve.py", "tail": "^\n",
        "end_of_turn_text": "^", "end_of_turn_ids": [94], "note": "", "data": "chat"}  # fmt: skip


def _import(src: Path, out: Path, name: str) -> Path:
    assert main(["import", str(src), "--name", name, "--out", str(out)]) == 0
    return out / name


def _start(patience, run: Path, log: Path, *flags: str, env: dict | None = None):
    """``gpt serve RUN --port 0 FLAGS`` in a subprocess; once it is ready: (process, base URL)."""
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpt_models", "serve", str(run), "--port", "0", *flags],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**os.environ, **(env or {})},
        )
    patience.wait_for(lambda: "gpt serve: ready" in log.read_text(), [proc], "the ready line")
    url = re.search(r"ready: .* on (http://\S+)", log.read_text()).group(1)
    return proc, url


def _stop(proc: subprocess.Popen, patience) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        patience.wait_for(lambda: proc.poll() is not None, [proc], "the server's exit")
    return proc.returncode


@pytest.fixture(scope="module")
def server(tmp_path_factory, patience):
    """The module's server: (run folder, base URL, its stderr log)."""
    root = tmp_path_factory.mktemp("serve")
    run = _import(DATA / "hf_gpt2", root, "tiny-gpt2")
    (run / "chat_format.json").write_text(json.dumps(CHAT))
    log = root / "serve.log"
    flags = ("--max-batch", "2", "--max-queue", "14")  # 16 requests held at most
    proc, url = _start(patience, run, log, *flags, env={"GPT_SERVE_API_KEY": KEY})
    yield run, url, log
    assert _stop(proc, patience) == 0, log.read_text()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server[1], api_key=KEY, max_retries=0, timeout=300)


def _text(client, **kw) -> str:
    return client.completions.create(model="tiny-gpt2", **kw).choices[0].text


def test_models_lists_the_run(client):
    assert [m.id for m in client.models.list().data] == ["tiny-gpt2"]


def test_greedy_completion_is_gpt_sample_at_temperature_0(server, client, capsys):
    out = client.completions.create(model="tiny-gpt2", prompt="Hello", max_tokens=10, temperature=0)
    assert out.usage.prompt_tokens == 5
    assert out.usage.completion_tokens == 10
    assert out.usage.total_tokens == 15
    assert out.choices[0].finish_reason == "length"
    argv = ["sample", "--run", str(server[0]), "--raw", "--prompt", "Hello", "--temperature", "0"]
    assert main([*argv, "--max-new-tokens", "10"]) == 0
    assert capsys.readouterr().out == "Hello" + out.choices[0].text + "\n"


def test_streaming_gives_the_same_text(client):
    kw = {"prompt": "The ", "max_tokens": 20, "temperature": 0.9, "seed": 7}
    whole = _text(client, **kw)
    chunks = list(client.completions.create(model="tiny-gpt2", stream=True, **kw))
    assert len(chunks) > 1
    assert "".join(c.choices[0].text for c in chunks) == whole
    assert chunks[-1].choices[0].finish_reason == "length"


def test_the_same_seed_gives_the_same_text(client):
    kw = {"prompt": "abc", "max_tokens": 16, "temperature": 1.0}
    first, again, other = (_text(client, seed=s, **kw) for s in (3, 3, 4))
    assert first == again
    assert first != other
    two = client.completions.create(model="tiny-gpt2", n=2, seed=3, **kw)
    assert two.choices[0].text == first  # text 0 of n draws as n=1 does
    assert two.choices[1].text != first
    assert two.usage.completion_tokens == 32


def test_stop_strings_end_the_text_before_them(client):
    free = _text(client, prompt="Hello", max_tokens=12, temperature=0)
    stop = free[4:6]
    cut = free[: free.index(stop)]
    out = client.completions.create(
        model="tiny-gpt2", prompt="Hello", max_tokens=12, temperature=0, stop=[stop, "never"]
    )
    assert (out.choices[0].text, out.choices[0].finish_reason) == (cut, "stop")
    streamed = client.completions.create(
        model="tiny-gpt2", prompt="Hello", max_tokens=12, temperature=0, stop=stop, stream=True
    )
    assert "".join(c.choices[0].text for c in streamed) == cut


def test_chat_uses_the_template_and_stops_at_the_end_of_the_turn(client):
    messages = [{"role": "user", "content": "hi"}]
    out = client.chat.completions.create(
        model="tiny-gpt2", messages=messages, temperature=0, max_tokens=6, logprobs=True
    )
    choice = out.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.role == "assistant"
    written = "<|user|>\nhi\n<|assistant|>\n"  # the template's text for these messages
    assert out.usage.prompt_tokens == len(written)
    assert len(choice.logprobs.content) == out.usage.completion_tokens
    assert all(t.logprob <= 0 for t in choice.logprobs.content)
    # The same text continued: the reply is what comes before the end-of-turn token "^".
    free = _text(client, prompt=written, max_tokens=6, temperature=0)
    assert "^" in free
    assert choice.message.content == free[: free.index("^")]
    streamed = client.chat.completions.create(
        model="tiny-gpt2", messages=messages, temperature=0, max_tokens=6, stream=True
    )
    chunks = list(streamed)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == choice.message.content


def test_sixteen_concurrent_requests_equal_sequential_ones(client):
    def ask(seed: int) -> str:
        return _text(client, prompt="Hi", max_tokens=12, temperature=0.8, seed=seed)

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        together = list(pool.map(ask, range(16)))
    # Batching changes no text: each equals its request sent alone.
    assert together[:3] == [ask(s) for s in range(3)]
    assert len(set(together)) > 8


def test_a_request_without_the_key_gets_401(server, client):
    for key in ("wrong", None):
        headers = {} if key is None else {"Authorization": f"Bearer {key}"}
        r = httpx.get(f"{server[1]}/models", headers=headers, timeout=60)
        assert r.status_code == 401
        assert r.json()["error"]["code"] == "invalid_api_key"
        assert "--api-key" in r.json()["error"]["message"]
    bad = openai.OpenAI(base_url=server[1], api_key="wrong", max_retries=0, timeout=60)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


@pytest.mark.parametrize(
    ("fields", "param", "words"),
    [
        ({"max_tokens": 0}, "max_tokens", "expected an integer >= 1"),
        ({"max_tokens": 40}, "max_tokens", "ask for at most 27"),
        ({"prompt": "x" * 40}, "prompt", "the prompt is 40 tokens long"),
        ({"temperature": -0.5}, "temperature", "expected a number >= 0"),
        ({"top_p": 0}, "top_p", "in (0, 1]"),
        ({"top_p": 1.5}, "top_p", "in (0, 1]"),
        ({"n": 3}, "n", "--max-batch"),
    ],
)
def test_bad_fields_get_400_naming_the_field(client, fields, param, words):
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(**{"model": "tiny-gpt2", "prompt": "Hello", **fields})
    error = err.value.body
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith(f"{param}: ") and words in error["message"]


def test_an_unknown_model_gets_404_and_bad_json_400_and_the_server_goes_on(server, client):
    with pytest.raises(openai.NotFoundError) as err:
        client.completions.create(model="gpt-4", prompt="Hi", max_tokens=2)
    assert "'gpt-4' does not exist" in err.value.body["message"]
    assert "'tiny-gpt2'" in err.value.body["message"]
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    r = httpx.post(f"{server[1]}/completions", content=b"{not json", headers=headers, timeout=60)
    assert r.status_code == 400
    assert "not valid JSON" in r.json()["error"]["message"]
    r = httpx.post(f"{server[1]}/embeddings", content=b"{}", headers=headers, timeout=60)
    assert r.status_code == 404
    assert "POST /v1/completions" in r.json()["error"]["message"]
    assert len(_text(client, prompt="Hi", max_tokens=3)) > 0  # still serving


def test_one_compile_per_program_and_bucket(server, client):
    # After every request above: each step size (1, 2 busy slots) and each prompt bucket
    # (16, 32 tokens) compiled once at most; the step sizes all before the server was ready.
    log = server[2].read_text()
    compiles = re.findall(r"compiled the (.*) program \((.*)\) in", log)
    assert len(compiles) == len(set(compiles)), log
    steps = [size for program, size in compiles if program == "step"]
    assert steps == ["1 slots", "2 slots"], log
    assert log.index("2 slots") < log.index("gpt serve: ready")


def test_sigterm_drains_the_request_in_flight_then_exits_0(tmp_path, patience):
    # A Llama-shaped model has no position table: its context grows with its config alone.
    src = tmp_path / "hf_long"
    src.mkdir()
    for f in (DATA / "hf_llama").iterdir():
        (src / f.name).write_bytes(f.read_bytes())
    config = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps(config | {"max_position_embeddings": 512}))
    run = _import(src, tmp_path, "long")
    log = tmp_path / "serve.log"
    proc, url = _start(
        patience, run, log, "--max-batch", "1", "--max-queue", "0", "--drain-timeout", "300"
    )
    try:
        client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=300)
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(
                model="long", messages=[{"role": "user", "content": "hi"}]
            )
        assert err.value.body["param"] == "messages"
        assert "has no chat template" in err.value.body["message"]
        stream = client.completions.create(
            model="long", prompt="Hi", max_tokens=400, temperature=0, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
        )  # fmt: skip
        chunks = iter(stream)
        first = next(chunks)
        # The one slot is busy and nothing may wait: 503, with when to retry.
        r = httpx.post(f"{url}/completions", json={"model": "long", "prompt": "x"}, timeout=60)
        assert r.status_code == 503
        assert r.headers["Retry-After"] == "1"
        assert "--max-queue 0" in r.json()["error"]["message"]
        proc.send_signal(signal.SIGTERM)
        rest = list(chunks)
    finally:
        code = _stop(proc, patience)
    assert code == 0, log.read_text()
    assert [c.choices[0].finish_reason for c in rest if c.choices][-1] == "length"
    assert rest[-1].usage.completion_tokens == 400
    assert "gpt serve: stopped (requests drained)" in log.read_text()
    assert first.choices[0].text is not None


def test_refusals_before_the_port_is_bound(server, monkeypatch, capsys, error_line):
    run = server[0]
    assert main(["serve", str(run), "--max-len", "64"]) == 2
    assert error_line(capsys.readouterr().err) == (
        "gpt: error: gpt serve --max-len 64: the model's context (model.seq_len) is 32 tokens; "
        "use --max-len 32 or less."
    )
    assert main(["serve", str(run), "--max-batch", "0"]) == 2
    assert "--max-batch 0: it must be >= 1" in error_line(capsys.readouterr().err)
    monkeypatch.setenv("GPT_MEMORY_BUDGET", "600KiB")
    assert main(["serve", str(run), "--max-batch", "64"]) == 2
    line = error_line(capsys.readouterr().err)
    assert "gpt serve does not fit in memory: its decoding step (64 sequences" in line
    assert "No checkpoint was read and no port was bound." in line
    assert re.search(r"--max-batch \d+", line.split("bound.")[1]), line
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    assert main(["serve", str(run)]) == 2
    line = error_line(capsys.readouterr().err)
    assert line.startswith("gpt: error: gpt serve needs the serve extra")
    assert line.endswith("pip install 'gpt-models[serve]'")
