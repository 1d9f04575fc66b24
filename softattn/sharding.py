"""Device mesh and parameter sharding rules.

``make_mesh(config.mesh)`` builds a ``jax.sharding.Mesh`` with axes
``("data", "model")``; ``config.mesh`` is ``dict(data=-1, model=1)`` style, one
``-1`` meaning "all remaining devices". Batches are split over ``data``;
parameters follow ``config.sharding_rules``, a list of ``(regex, strategy)``
pairs matched (``re.search``) against the ``/``-joined parameter path, first
match wins, unmatched parameters are replicated:

* ``replicate``: a full copy on every device.
* ``fsdp``: the largest dimension divisible by the ``data`` axis size is split
  over ``data`` (ZeRO-3 style: stored split, all-gathered for the forward by
  ``gather_for_compute``).
* ``tp``: the last dimension divisible by the ``model`` axis size is split over
  ``model`` (tensor parallelism on the output features).
* ``fsdp_tp``: both, on different dimensions.

A parameter with no divisible dimension is replicated, so the rules are safe
on any mesh.

On a TPU the mesh lists its devices in physical order (``physical_order``),
and ``fsdp`` gradients are reduce-scattered in stages along the slice's
physical dimensions (``reduction_stages``, ``constrain_like_params``).
"""

from __future__ import annotations

import functools
import re
from typing import Any, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from softattn import config_schema


AXES = ("data", "model")
STRATEGIES = ("replicate", "fsdp", "tp", "fsdp_tp")
# The largest group the TPU compiler reduce-scatters in one go (libtpu
# 0.0.42-0.0.50, found by AOT compiles: a 2x2, a 2x4 block or a line of 16
# chips fuses into an all-reduce-scatter; a 4x4 block stays a full
# all-reduce).
ONE_STAGE_MAX = 8


def mesh_shape(mesh_cfg: Any, num_devices: int) -> tuple[int, int]:
  """``(data, model)`` sizes with the ``-1`` resolved; checks the product.

  Raises:
    ValueError: unknown axis, two ``-1``, or sizes that do not use exactly the
      available devices (the message says what to set).
  """
  cfg = dict(mesh_cfg or {})
  for k in cfg:
    if k not in AXES:
      raise ValueError(f"Unknown mesh axis {k!r} in config.mesh; valid axes are "
                       f"{list(AXES)} (e.g. config.mesh = dict(data=-1, model=1)).")
  sizes = [int(cfg.get("data", -1)), int(cfg.get("model", 1))]
  if sizes.count(-1) > 1:
    raise ValueError("Only one config.mesh axis may be -1 (all remaining devices).")
  known = int(np.prod([s for s in sizes if s != -1]))
  if -1 in sizes:
    if known <= 0 or num_devices % known:
      raise ValueError(f"config.mesh {cfg} does not divide the {num_devices} "
                       f"devices; pick sizes whose product divides {num_devices}.")
    sizes[sizes.index(-1)] = num_devices // known
  if int(np.prod(sizes)) > num_devices or min(sizes) < 1:
    raise ValueError(f"config.mesh {cfg} needs {int(np.prod(sizes))} devices but "
                     f"{num_devices} are available; shrink config.mesh.")
  return sizes[0], sizes[1]


def _place(device) -> tuple[int, ...] | None:
  """(slice, z, y, x, core) of a TPU device, outermost first; None elsewhere."""
  coords = getattr(device, "coords", None)
  if coords is None:
    return None
  return (getattr(device, "slice_index", 0) or 0, *reversed(tuple(coords)),
          getattr(device, "core_on_chip", 0) or 0)


def physical_order(devices: Sequence[jax.Device]) -> list[jax.Device]:
  """TPU devices sorted row-major by (slice, z, y, x, core); others as given.

  Why: neighbours on the ``model`` axis (the faster one) are then neighbours
  on the chip grid, and every factor of the ``data`` axis is a physical
  line or block, which ``reduction_stages`` needs. ``jax.devices()`` is in
  id order, which on some slices (a v5e-16's ids run in 2x2 blocks) is not.
  """
  devices = list(devices)
  if any(_place(d) is None for d in devices):
    return devices
  return sorted(devices, key=_place)


def make_mesh(mesh_cfg: Any, devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A ``("data", "model")`` mesh over the first ``data * model`` devices,
  in ``physical_order``."""
  devices = physical_order(jax.devices() if devices is None else devices)
  d, m = mesh_shape(mesh_cfg, len(devices))
  return Mesh(np.asarray(devices[:d * m]).reshape(d, m), AXES)


@functools.lru_cache(maxsize=None)
def reduction_stages(mesh: Mesh) -> tuple[int, ...]:
  """Sizes whose product is the ``data`` axis: one reduce-scatter each.

  ``(n,)``, one stage, unless the mesh is a TPU slice (or several) laid out
  by ``physical_order`` with ``model`` 1 and more than ``ONE_STAGE_MAX``
  chips. Then the outermost physical dimension (slices, then z, then y)
  becomes a stage while the dimensions left span more than
  ``ONE_STAGE_MAX`` chips, and what is left is the last stage: a v5e-16
  (4x4) gives ``(4, 4)``, a v5e-256 ``(16, 16)``, a v4-32 (2x2x4)
  ``(4, 4)``, two v5e-256 ``(2, 16, 16)``. Cached per mesh: every
  parameter's sharding asks.
  Why: the TPU compiler turns one reduce-scatter over a 4x4 block or larger
  into a full all-reduce and a slice (twice the ICI bytes, full-size
  gradients in HBM); along one dimension at a time it keeps them
  reduce-scatters (``tests/test_aot_collectives.py``).
  """
  n = mesh.shape["data"]
  places = [_place(d) for d in mesh.devices.flat]
  if n <= ONE_STAGE_MAX or mesh.shape["model"] != 1 or None in places:
    return (n,)
  ranks = [sorted({p[i] for p in places}) for i in range(len(places[0]))]
  dims = [len(r) for r in ranks]
  if [tuple(r.index(v) for r, v in zip(ranks, p)) for p in places] != \
      list(np.ndindex(*dims)):
    return (n,)       # not a full box in row-major order: one stage
  dims = [x for x in dims if x > 1]
  stages = []
  while len(dims) > 1 and int(np.prod(dims)) > ONE_STAGE_MAX:
    stages.append(dims.pop(0))
  return (*stages, int(np.prod(dims)))


def _spec_for(shape, strategy: str, mesh: Mesh) -> P:
  spec = [None] * len(shape)
  n_data, n_model = mesh.shape["data"], mesh.shape["model"]
  if strategy in ("tp", "fsdp_tp") and n_model > 1:
    for i in reversed(range(len(shape))):
      if shape[i] % n_model == 0 and shape[i] >= n_model:
        spec[i] = "model"
        break
  if strategy in ("fsdp", "fsdp_tp") and n_data > 1:
    order = sorted(range(len(shape)), key=lambda i: -shape[i])
    for i in order:
      if spec[i] is None and shape[i] % n_data == 0 and shape[i] >= n_data:
        spec[i] = "data"
        break
  return P(*spec)


def check_rules(rules) -> list[tuple[re.Pattern, str]]:
  """Compiled ``(regex, strategy)`` pairs; unknown strategy raises ValueError."""
  out = []
  for rule in rules or ():
    pattern, strategy = rule
    if strategy not in STRATEGIES:
      raise ValueError(f"Unknown sharding strategy {strategy!r} in "
                       f"config.sharding_rules; use one of {list(STRATEGIES)}.")
    out.append((re.compile(pattern), strategy))
  return out


config_schema.register_check("sharding_rules", check_rules)


def tree_shardings(tree: Any, rules, mesh: Mesh) -> Any:
  """A ``NamedSharding`` for every leaf of ``tree`` (arrays or ShapeDtypeStructs).

  Used for parameters and, since optax states mirror parameter paths (e.g.
  ``opt_state/0/mu/Block_0/...``), for the optimizer state too: rules match
  anywhere in the path.
  """
  compiled = check_rules(rules)

  def one(path, leaf):
    shape = getattr(leaf, "shape", ())
    s = jax.tree_util.keystr(path, simple=True, separator="/")
    for pat, strategy in compiled:
      if pat.search(s):
        return NamedSharding(mesh, _spec_for(shape, strategy, mesh))
    return NamedSharding(mesh, P())
  return jax.tree_util.tree_map_with_path(one, tree)


def param_shardings(params: Any, rules, mesh: Mesh) -> Any:
  """The storage sharding of ``params``: exactly the train state's ``params``
  entry, whose paths start with ``params/`` (a rule may anchor on it)."""
  return tree_shardings({"params": params}, rules, mesh)["params"]


def without_data_axis(sh: NamedSharding) -> NamedSharding:
  """``sh`` with every ``data`` entry of its spec removed (``model`` kept)."""
  def drop(entry):
    if entry == "data":
      return None
    if isinstance(entry, tuple):
      rest = tuple(a for a in entry if a != "data")
      return rest if len(rest) > 1 else (rest[0] if rest else None)
    return entry
  return NamedSharding(sh.mesh, P(*(drop(e) for e in sh.spec)))


def reduction_chain(sh: NamedSharding) -> list[NamedSharding]:
  """The shardings a gradient of storage sharding ``sh`` is constrained to,
  in order, to reach ``sh`` by ``reduction_stages``: the outer stages'
  ``data`` split alone (on a mesh of the same devices with ``data``
  factored into ``data0``, ``data1``, ...), then ``sh`` itself, a local
  slice away. ``[sh]`` with one stage or no ``data`` entry."""
  stages = reduction_stages(sh.mesh)
  if len(stages) == 1 or "data" not in sh.spec:
    return [sh]
  names = tuple(f"data{i}" for i in range(len(stages)))
  staged = Mesh(sh.mesh.devices.reshape(*stages, sh.mesh.shape["model"]),
                names + ("model",))
  return [NamedSharding(staged, P(*(names[:k] if e == "data" else e
                                    for e in sh.spec)))
          for k in range(1, len(stages))] + [sh]


def _constrain_in_order(x, chain):
  for sh in chain:
    x = jax.lax.with_sharding_constraint(x, sh)
  return x


def _gathered(chain: list[NamedSharding]):
  """Identity whose forward is constrained to the storage sharding
  (``chain[-1]``) minus ``data`` and whose backward runs the cotangent
  through ``chain`` (``reduction_chain`` of the storage sharding)."""
  @jax.custom_vjp
  def gather(p):
    return jax.lax.with_sharding_constraint(p, without_data_axis(chain[-1]))

  def bwd(_, g):
    return (_constrain_in_order(g, chain),)
  gather.defvjp(lambda p: (gather(p), None), bwd)
  return gather


def gather_for_compute(params: Any, rules, mesh: Mesh | None) -> Any:
  """``params`` constrained to their rule's sharding minus the ``data`` axis.

  Call it inside the jitted forward, on the (cast) parameters, before the
  model uses them. Why: an ``fsdp`` parameter is stored split over ``data``,
  and so is the batch. Left alone, XLA's SPMD partitioner may resolve a
  matmul ``x @ W`` whose contracted or output dim of ``W`` is ``data``-split
  by keeping ``W`` split and *gathering the batch* instead: every device then
  holds global-batch activations (tensors such as ``[4096, 196, 768]``) and
  per-device memory grows with the pod instead of shrinking. Constraining
  the weight to "no ``data`` axis" forces the other choice, ZeRO-3's: the
  weight is all-gathered over ``data`` (one layer at a time, freed after use)
  and activations stay split over the batch.

  Only ``data`` is removed: a ``model``-split dim (``tp``, ``fsdp_tp``) stays
  split, so tensor parallelism is untouched. Where ``reduction_stages``
  splits the reduction, a matrix's backward does not carry the gathered
  layout back (a plain constraint's transpose would: a full all-reduce,
  which a 4x4 or larger TPU group does not fuse with the slice after it):
  it constrains the cotangent through ``reduction_chain`` so it leaves as
  reduce-scatters, one physical dimension at a time. Either way
  ``constrain_like_params`` then leaves the gradients, the optimizer state
  and the update sharded. With ``replicate`` rules or a mesh without a
  ``data`` axis larger than 1 this is a no-op; ``mesh=None`` (unit tests,
  no mesh) returns ``params`` unchanged.
  """
  if mesh is None or mesh.shape.get("data", 1) == 1:
    return params
  shardings = param_shardings(params, rules, mesh)

  def one(p, sh):
    chain = reduction_chain(sh)
    if p.ndim < 2 or len(chain) == 1:
      # One stage: the plain constraint's transpose (all-reduce, then the
      # slice constrain_like_params asks for) is what XLA:TPU fuses into a
      # reduce-scatter. A vector's (norm scales, biases) few bytes: given
      # the staged chain, XLA moves the activations to the vector's
      # sharding instead (an all-to-all of [B, L, E]).
      return jax.lax.with_sharding_constraint(p, without_data_axis(sh))
    return _gathered(chain)(p)
  return jax.tree.map(one, params, shardings)


def constrain_like_params(tree: Any, rules, mesh: Mesh | None) -> Any:
  """``tree`` (gradients, updates) constrained to its parameters' storage
  sharding, through ``reduction_chain``.

  Call it on the gradients right after ``jax.value_and_grad``. A matrix
  that ``gather_for_compute`` staged is already there (this pins it); every
  other gradient arrives in the gathered layout, and this constraint is the
  slice that XLA:TPU fuses with the all-reduce before it into a
  reduce-scatter (on one stage). Either way the finiteness check, the norms
  and the optimizer then run on shards.
  ``mesh=None`` returns ``tree`` unchanged.
  """
  if mesh is None:
    return tree
  shardings = param_shardings(tree, rules, mesh)
  return jax.tree.map(lambda x, sh: _constrain_in_order(x, reduction_chain(sh)),
                      tree, shardings)


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Leading (batch) axis over ``data``, replicated over ``model``."""
  return NamedSharding(mesh, P("data"))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())
