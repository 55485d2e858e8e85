"""logdict in notebooks: _repr_html_."""

import jax
import jax.numpy as jnp

import lox


def _logs():
    return lox.logdict(
        {
            "train/loss": jnp.array([3.0, 2.0, 1.5]),
            "eval/loss": jnp.array([2.5]),
            "grads": {"w": jnp.ones((3, 4)), "b": jnp.ones((3,))},
        },
        steps={"train/loss": {"step": jnp.array([0, 1, 2])}, "eval/loss": {"step": jnp.array([2])}},
    )


def test_repr_html_groups_keys_and_shows_shapes_events_steps_and_last_values():
    page = _logs()._repr_html_()
    assert '<div class="cp-head">logdict<span class="cp-sum">3 keys</span></div>' in page
    assert '<details open><summary><span class="cp-node">train/</span></summary>' in page
    assert '<details open><summary><span class="cp-node">eval/</span></summary>' in page
    assert (
        '<tr><td class="cp-name">loss</td><td class="cp-kind">float32[]</td>'
        '<td class="cp-num">3 events</td><td class="cp-meta">step 0…2</td>'
        '<td class="cp-num">1.5</td><td><svg'
    ) in page
    assert '<td class="cp-meta">step 2</td><td class="cp-num">2.5</td><td></td>' in page
    assert '<td class="cp-name">grads</td><td class="cp-kind">float32[], float32[4]</td>' in page


def test_repr_html_escapes_keys_and_shows_only_shapes_when_traced():
    logs = lox.logdict({"<b>x": jnp.array([1.0, 2.0]), "<i>/y": jnp.array([1.0])})
    page = logs._repr_html_()
    assert "<b>" not in page and '<td class="cp-name">&lt;b&gt;x</td>' in page
    assert "<i>" not in page and '<span class="cp-node">&lt;i&gt;/</span>' in page
    seen = []
    jax.jit(lambda logs: seen.append(logs._repr_html_()) or 0)(_logs())
    assert '<td class="cp-num">3 events</td><td class="cp-meta">step</td>' in seen[0]
    assert "<svg" not in seen[0]
