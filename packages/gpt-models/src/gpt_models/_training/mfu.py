"""The MFU denominator: a fixed peak FLOP/s per device kind, or none (then no MFU is shown).

MFU (model FLOPs utilisation) = ``flops_per_token * tokens_per_second / peak``. The peak must be a
stable figure: an earlier version probed the CPU with a matmul at start-up, and the same config then
showed 27%, 45% and 73% on one machine depending on how busy it was. So:

- GPUs/TPUs: the vendor's dense (no sparsity) bf16 tensor figure per device, looked up by the exact
  ``device.device_kind`` string (an "NVIDIA H100 PCIe" is not an "NVIDIA H100 80GB HBM3"; a
  substring match gave the PCIe card the SXM figure and an L40 the L4's). Float32 compute on a GPU
  runs matmuls as TF32, half the bf16 rate, so the peak is halved there; a TPU runs float32 matmuls
  at default precision in bf16 passes, so its peak is not halved.
- CPUs publish no useful peak and a measured one moves with the machine's load: no MFU on CPU.
- Any device: ``log.peak_flops`` (FLOP/s per device) sets the peak, for kinds not in the table,
  for CPUs, or to use another convention; it is multiplied by the device count like the table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# Dense bf16 FLOP/s per device, keyed by the exact `device_kind` JAX reports. V100/T4 have no bf16:
# their fp16 tensor figure is given. Sources: the vendors' data sheets (dense, not "with sparsity").
PEAK_FLOPS: Mapping[str, float] = {
    "NVIDIA B200": 2250e12,
    "NVIDIA H200": 989.4e12,
    "NVIDIA GH200 480GB": 989.4e12,
    "NVIDIA H100 80GB HBM3": 989.4e12,
    "NVIDIA H100 NVL": 835.5e12,
    "NVIDIA H100 PCIe": 756.5e12,
    "NVIDIA A100-SXM4-80GB": 312e12,
    "NVIDIA A100-SXM4-40GB": 312e12,
    "NVIDIA A100 80GB PCIe": 312e12,
    "NVIDIA A100-PCIE-40GB": 312e12,
    "NVIDIA L40S": 362.05e12,
    "NVIDIA L40": 181.05e12,
    "NVIDIA L4": 121e12,
    "NVIDIA A10": 125e12,
    "Tesla V100-SXM2-16GB": 125e12,
    "Tesla V100-SXM2-32GB": 125e12,
    "Tesla V100-PCIE-16GB": 112e12,
    "Tesla V100-PCIE-32GB": 112e12,
    "Tesla T4": 65e12,
    "TPU v4": 275e12,
    "TPU v5 lite": 197e12,
    "TPU v5": 459e12,
    "TPU v6 lite": 918e12,
}


def peak_flops(devices: Sequence[Any], compute_dtype: Any, override: float = 0.0) -> float | None:
    """Total peak FLOP/s of ``devices`` for MFU, or ``None`` when it is unknown (no MFU is shown
    then).

    Args:
        devices: the mesh's devices (``jax.Device``; only ``device_kind`` and ``platform`` are
            read).
        compute_dtype: the model's compute dtype; float32 on a GPU halves the peak (TF32).
        override: FLOP/s per device (``log.peak_flops``); used when positive, on any device.

    Example:
        >>> import jax.numpy as jnp
        >>> from types import SimpleNamespace as Device
        >>> h100 = Device(device_kind="NVIDIA H100 PCIe", platform="gpu")
        >>> peak_flops([h100] * 2, jnp.bfloat16) / 1e12
        1513.0
        >>> peak_flops([Device(device_kind="cpu", platform="cpu")], jnp.float32) is None
        True
    """
    if not devices:
        return None
    if override > 0:
        return override * len(devices)
    first = devices[0]
    per_device = PEAK_FLOPS.get(first.device_kind)
    if per_device is None or first.platform == "cpu":
        return None
    if first.platform == "gpu" and np.dtype(compute_dtype) == np.float32:
        per_device /= 2
    return per_device * len(devices)


def unknown_peak_note(devices: Sequence[Any], override: float = 0.0) -> str | None:
    """A one-line note saying why MFU is not shown and how to show it, or None if it is shown."""
    if not devices or peak_flops(devices, np.float32, override) is not None:
        return None
    kind = devices[0].device_kind
    why = (
        "CPUs publish no stable peak" if devices[0].platform == "cpu" else "it is not in the table"
    )
    return (
        f"note: no MFU shown: the peak FLOP/s of {kind!r} is unknown ({why}). Pass one with "
        "--set log.peak_flops=<FLOP/s per device> (see docs/gpt-models/performance.md, MFU)."
    )
