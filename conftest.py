"""Shared by every test folder: meshes shaped by the devices present, and `min_devices`.

On CPU the package conftests ask for 8 fake devices (`XLA_FLAGS`, overridable), so the CPU default
stays a (2, 4) data x model grid; on a real machine (1 or 8 GPUs, a TPU v4-8's 4 chips) the same
tests build the grid the devices allow. Tests that cannot mean anything on fewer devices carry
`@pytest.mark.min_devices(n)` and are skipped with the reason. The wheels session copies this file
next to the copied tests folders, so installed wheels are tested the same way.

JAX is imported lazily here: this file loads before a package conftest sets `XLA_FLAGS`.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "min_devices(n): needs at least n JAX devices; skipped, with the reason, on fewer",
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    import jax

    for marker in item.iter_markers("min_devices"):
        (needed,) = marker.args
        if jax.device_count() < needed:
            pytest.skip(
                f"needs at least {needed} devices ({marker.kwargs.get('why', 'multi-device test')}); "
                f"{jax.device_count()} {jax.default_backend()} device(s) present"
            )


def grid_for(n: int) -> tuple[int, int]:
    """(data, model) sizes covering `n` devices: 8 -> (2, 4), 4 -> (2, 2), 2 -> (2, 1), 1 -> (1, 1)."""
    return (2, n // 2) if n >= 2 and n % 2 == 0 else (1, n)


@pytest.fixture(scope="session")
def device_grid() -> tuple[int, int]:
    """A 2-D (data, model) mesh shape over every device present: (2, 4) on the 8 fake CPU devices."""
    import jax

    return grid_for(jax.device_count())
