"""Which GPU kernels run a fused call: Mosaic GPU (``mosaic/``) or Triton
(``triton/``), the one place that chooses.

Mosaic GPU can run a call on a Hopper GPU (compute capability 9.x: H100,
H200, H800, H20, GH200; ``wgmma`` is Hopper's, Blackwell has ``tcgen05``
instead) with a jax whose ``pallas.mosaic_gpu`` has every construct the
kernels use (``mosaic.tile.missing_api``), for a call they take
(``mosaic.wrapper.unsupported_reason``: head dims 64/128/256, blocks of 64)
in bfloat16 or float16 (``MOSAIC_DTYPES``).

Which one runs (``ENV``, default ``auto``): where Mosaic GPU can run the
call, ``auto`` takes it once it has agreed with dense on the device itself
(``device_check``: once per kind of call and process, a few seconds), and
keeps the Triton kernels, with a warning naming what differed, where it has
not. The check is there because the Mosaic GPU kernels have run only in
Mosaic GPU's interpreter on CPU (no GPU was lent to the sessions that wrote
them; docs/kernels.md); ``MOSAIC_VALIDATED`` (set once
``tests/test_pallas_mosaic_gpu.py`` has passed on a Hopper GPU) or a jax
without Pallas' Triton lowering (deprecated since jax 0.11) skips it. A
target that cannot run the check (an abstract device of an AOT mesh) keeps
Triton until then. ``SOFTATTN_GPU_KERNELS=mosaic`` takes Mosaic GPU wherever
it can run the call, unchecked; ``triton`` forces Triton.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re

import jax
import jax.numpy as jnp

from softattn.pallas.common import prepare

# Hopper device kinds, for devices that do not report a compute capability
# (an abstract device of an AOT mesh, a jax that does not expose it).
_HOPPER_KIND = re.compile(r"\b(G?H(100|200|800|20))\b", re.IGNORECASE)


def is_hopper(device_kind: str, compute_capability=None) -> bool:
  if compute_capability:
    return str(compute_capability).startswith("9.")
  return bool(_HOPPER_KIND.search(device_kind or ""))


# float32 stays on Triton: Mosaic GPU's f32 (TF32) wgmma takes its second
# operand K-major only ("Only f16 WGMMA supports transposes"), a transposed
# SMEM view, which Mosaic GPU's interpreter cannot run (mosaic/tile.py); the
# kernels compute float32 right in the interpreter. None: any dtype (tests).
MOSAIC_DTYPES = ("bfloat16", "float16")


ENV = "SOFTATTN_GPU_KERNELS"
PREFERENCES = ("auto", "mosaic", "triton")
# Flip when tests/test_pallas_mosaic_gpu.py has passed on a Hopper GPU (it
# runs the hardware kernels there) and benchmarks/README.md records it.
MOSAIC_VALIDATED = False


@functools.cache
def triton_available() -> bool:
  """Whether this jax still ships Pallas' Triton lowering."""
  return importlib.util.find_spec("jax.experimental.pallas.triton") is not None


def why_not_mosaic(mosaic_missing: tuple[str, ...], device_kind: str,
                  compute_capability=None, refusal: str | None = None,
                  dtype=None) -> str | None:
  """Why the Mosaic GPU kernels cannot run this call (None: they can):
  this jax's missing Mosaic GPU constructs, the target device, the
  kernels' own refusal and the inputs' dtype."""
  if mosaic_missing:
    return ("this jax's pallas.mosaic_gpu lacks "
            f"{', '.join(mosaic_missing)}; upgrade jax")
  if refusal:
    return refusal
  if (dtype is not None and MOSAIC_DTYPES is not None
      and jnp.dtype(dtype).name not in MOSAIC_DTYPES):
    return (f"Mosaic GPU's kernels take {' or '.join(MOSAIC_DTYPES)} on a "
            f"GPU, not {jnp.dtype(dtype).name}")
  if not is_hopper(device_kind, compute_capability):
    return (f"Mosaic GPU's kernels need a Hopper GPU (wgmma), not "
            f"{device_kind!r}")
  return None


def preference() -> str:
  pref = os.environ.get(ENV, "auto") or "auto"
  if pref not in PREFERENCES:
    raise ValueError(f"{ENV}={pref!r}; use one of {', '.join(PREFERENCES)}")
  return pref


def choose(mosaic_missing: tuple[str, ...], device_kind: str,
           compute_capability=None, mosaic_reason: str | None = None,
           dtype=None, prefer: str | None = None, check=None) -> str:
  """``"mosaic"`` or ``"triton"`` (see the module docstring) from what
  ``why_not_mosaic`` reads (``mosaic_reason``: the kernels' own refusal),
  the preference (default: ``ENV``) and, for ``auto``, ``check()``: None
  where the kernels agree with dense on this device, else why not
  (``device_check.failure``; None: the target cannot run the check)."""
  prefer = prefer or preference()
  why = why_not_mosaic(mosaic_missing, device_kind, compute_capability,
                       mosaic_reason, dtype)
  if prefer == "triton" or why:
    return "triton"
  if prefer == "mosaic" or MOSAIC_VALIDATED or not triton_available():
    return "mosaic"
  return "mosaic" if check is not None and check() is None else "triton"


def _target_device():
  mesh = prepare.context_mesh()
  device = getattr(mesh, "abstract_device", None) if mesh else None
  return jax.devices()[0] if device is None else device


def _can_check(device) -> bool:
  """Whether ``device`` is one the check can run on: a GPU in hand, not an
  abstract one (AOT)."""
  return isinstance(device, jax.Device) and device.platform == "gpu"


def _device_check(device, norm, p, d, dv, blocks, dtype, cap):
  """``choose``'s ``check`` for this call, or None where the target is no
  device the check can run on."""
  if not _can_check(device):
    return None
  from softattn.pallas.gpu import device_check  # noqa: PLC0415
  kind = device_check.kind_of(norm, p, d, dv, blocks, dtype, cap)
  return lambda: device_check.failure(norm, kind, device.device_kind)


def backend(norm, p=None, d=64, dv=None, blocks=None, dtype=None,
            logits_soft_cap=None) -> str:
  """The backend this call runs on for the target device."""
  from softattn.pallas.gpu.mosaic import tile as mtile  # noqa: PLC0415
  from softattn.pallas.gpu.mosaic import wrapper as mosaic  # noqa: PLC0415
  device = _target_device()
  check = _device_check(device, norm, p, d, dv, blocks,
                        jnp.bfloat16 if dtype is None else dtype,
                        logits_soft_cap)
  return choose(mtile.missing_api(), getattr(device, "device_kind", ""),
                getattr(device, "compute_capability", None),
                mosaic.unsupported_reason(norm, p, d, dv, blocks, dtype),
                dtype, check=check)


def _module(name):
  if name == "mosaic":
    from softattn.pallas.gpu.mosaic import wrapper  # noqa: PLC0415
  else:
    from softattn.pallas.gpu.triton import wrapper  # noqa: PLC0415
  return wrapper


def gpu_attention(query, key, value, norm, p, mask, scale, causal,
                  chunk_size=None, query_chunk_size=None, interpret=None,
                  logits_soft_cap=None):
  """``pallas_attention`` on a GPU target: the chosen backend's kernels
  (arguments as ``triton.wrapper.gpu_attention``)."""
  name = backend(norm, p, query.shape[-1], value.shape[-1],
                 (chunk_size, query_chunk_size or chunk_size), query.dtype,
                 logits_soft_cap)
  return _module(name).gpu_attention(
      query, key, value, norm, p, mask, scale, causal, chunk_size,
      query_chunk_size, interpret, logits_soft_cap=logits_soft_cap)


def unsupported_reason(norm, p=None, d=64, dv=None, blocks=None,
                       dtype=None, logits_soft_cap=None):
  """Why the backend ``gpu_attention`` would pick cannot take this call
  (None: it can). ``dtype``: the inputs' (None: bfloat16's choice; float32
  goes to Triton, which lacks ``erf``)."""
  name = backend(norm, p, d, dv, blocks, dtype, logits_soft_cap)
  return _module(name).unsupported_reason(norm, p, d, dv, blocks)
