"""Rebuild notebook_display.png: Params and logdict as a notebook renders them.

    JAX_PLATFORMS=cpu python docs/img/notebook_display.py /tmp/display.html
    chromium --headless --hide-scrollbars --window-size=1000,735 \
        --screenshot=docs/img/notebook_display.png file:///tmp/display.html
"""

import html
import sys

import jax
import jax.numpy as jnp

import blox as bx
import lox

graph = bx.Graph("net")
rng = bx.Rng(graph / "rng")
conv = bx.Conv(graph / "encoder" / "conv", 16, (3, 3), rng=rng)
bn = bx.BatchNorm(graph / "encoder" / "bn")
norm = bx.LayerNorm(graph / "head" / "norm")
out = bx.Linear(
    graph / "head" / "out", 10, rng=rng, kernel_metadata={"logical_axes": ("embed", "vocab")}
)


def model(params, x):
    y, params = conv(params, x)
    y, params = bn(params, y, is_training=True)
    y, params = norm(params, y.mean((1, 2)))
    return out(params, y)


params = model(rng.seed(bx.Params(), seed=0), jnp.ones((2, 8, 8, 3)))[1].locked()


def train(_):
    def body(carry, i):
        loss = 2.0 * jnp.exp(-i / 10.0) + 0.1 * jnp.sin(i)
        lox.log({"train/loss": loss, "train/lr": 1e-3 * jnp.minimum(1.0, i / 10)}, step=i)
        return carry, None

    jax.lax.scan(body, 0, jnp.arange(40))
    lox.log({"eval/loss": jnp.float32(0.42), "eval/accuracy": jnp.float32(0.91)}, step=39)
    return 0


_, logs = lox.spool(train)(0)


def cell(n, source, output):
    return (
        f'<div class="cell"><div class="prompt">In [{n}]:</div>'
        f'<pre class="src">{html.escape(source)}</pre></div>'
        f'<div class="cell"><div class="prompt out">Out[{n}]:</div>'
        f'<div class="output">{output}</div></div>'
    )


STYLE = """body { font-family: system-ui, sans-serif; margin: 16px; background: #fff; }
.cell { display: flex; margin: 4px 0; }
.prompt { width: 70px; color: #303f9f; font-family: monospace; padding-top: 6px; }
.prompt.out { color: #d84315; }
.src { background: #f5f5f5; border: 1px solid #e0e0e0; padding: 6px 8px; margin: 0; flex: 1;
  font-size: 13px; }
.output { flex: 1; padding-top: 4px; }"""

page = (
    f'<!doctype html><html><head><meta charset="utf-8"><style>{STYLE}</style></head><body>'
    f"{cell(3, 'params', params._repr_html_())}{cell(4, 'logs', logs._repr_html_())}"
    "</body></html>"
)
with open(sys.argv[1], "w", encoding="utf-8") as f:
    f.write(page)
