"""One process of the two-process test: ``python two_process_worker.py PID PORT OUT.json``.

Not a test module: ``test_distributed.py`` starts two of these and compares their results with
the same computation done in one process.
"""

import json
import os
import sys


def computation(mesh, batch_fn):
    """The flow the test checks: sharded init, a global batch, a jitted loss over both."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import paramspec as ps

    rules = ps.Rules({"batch": "data", "embed": None, "mlp": "model"})
    specs = {
        "up": {
            "kernel": ps.ParamSpec((8, 16), ("embed", "mlp")),
            "bias": ps.ParamSpec((16,), ("mlp",), initializer=jax.nn.initializers.zeros),
        },
        "bits": ps.ParamSpec(
            (8, 16),
            ("embed", "mlp"),
            initializer=lambda k, s, d: jax.random.randint(k, s, 0, 1 << 20).astype(d),
        ),
    }
    params = ps.init(specs, jax.random.key(42), mesh, rules)
    global_rows = np.arange(4 * 8, dtype=np.float32).reshape(4, 8) / 10
    batch = ps.make_global_batch({"x": batch_fn(global_rows)}, ("batch",), mesh, rules)

    @jax.jit
    def loss(params, batch):
        h = batch["x"] @ params["up"]["kernel"] + params["up"]["bias"]
        h = ps.constrain(h, ("batch", "mlp"), mesh, rules)
        return jnp.mean(jnp.tanh(h) ** 2), jnp.sum(params["bits"])

    value, bits = loss(params, batch)
    gathered = jax.experimental.multihost_utils.process_allgather(batch["x"], tiled=True)
    return {
        "loss": float(value),
        "bits_sum": float(bits),
        "kernel_sum": float(jax.jit(jnp.sum)(params["up"]["kernel"])),
        "batch_shape": list(batch["x"].shape),
        "batch": np.asarray(gathered).tolist(),
        "kernel_spec": [str(a) for a in params["up"]["kernel"].sharding.spec],
    }


def main() -> None:
    pid, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    # Set here, not at import: the test imports this module for `computation` (8 devices).
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    import jax.experimental.multihost_utils

    import paramspec as ps

    # The test waits on progress (its peer starting JAX on a loaded machine can take minutes);
    # this bound is for a peer that never comes.
    info = ps.initialize_distributed(f"localhost:{port}", 2, pid, initialization_timeout=600)
    mesh = ps.make_mesh((2, 2), ("data", "model"))
    # Each process holds its own half of the global batch.
    result = computation(mesh, lambda rows: rows[2 * pid : 2 * pid + 2])
    result["info"] = list(info)
    with open(out, "w") as f:
        json.dump(result, f)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
