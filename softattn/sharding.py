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
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from softattn import config_schema


AXES = ("data", "model")
STRATEGIES = ("replicate", "fsdp", "tp", "fsdp_tp")


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


def make_mesh(mesh_cfg: Any, devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A ``("data", "model")`` mesh over the first ``data * model`` devices."""
  devices = list(jax.devices() if devices is None else devices)
  d, m = mesh_shape(mesh_cfg, len(devices))
  return Mesh(np.asarray(devices[:d * m]).reshape(d, m), AXES)


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
  split, so tensor parallelism is untouched. The transpose of an all-gather
  is a reduce-scatter, once the gradients are constrained back to the
  storage sharding (``constrain_like_params``): they then come back
  ``data``-split and the optimizer state and update stay sharded (no full
  copy of either). With
  ``replicate`` rules or a mesh without a ``data`` axis larger than 1 this is
  a no-op; ``mesh=None`` (unit tests, no mesh) returns ``params`` unchanged.
  """
  if mesh is None or mesh.shape.get("data", 1) == 1:
    return params
  shardings = param_shardings(params, rules, mesh)
  return jax.tree.map(
      lambda p, sh: jax.lax.with_sharding_constraint(p, without_data_axis(sh)),
      params, shardings)


def constrain_like_params(tree: Any, rules, mesh: Mesh | None) -> Any:
  """``tree`` (gradients, updates) constrained to its parameters' storage sharding.

  Call it on the gradients right after ``jax.value_and_grad``. Why: the
  forward's ``gather_for_compute`` constraint (no ``data`` axis) carries into
  the backward, so left alone XLA delivers each gradient in that gathered
  layout: a full all-reduce over ``data`` per tensor, then the finiteness
  check, the norms and the optimizer's slice on full-size gradients.
  Constraining them to the storage sharding (``data``-split under ``fsdp``)
  makes the reduction a reduce-scatter (half the bytes of an all-reduce, and
  each chip keeps only its shard) and every later op runs on the shard.
  ``mesh=None`` returns ``tree`` unchanged.
  """
  if mesh is None:
    return tree
  shardings = param_shardings(tree, rules, mesh)
  return jax.tree.map(jax.lax.with_sharding_constraint, tree, shardings)


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Leading (batch) axis over ``data``, replicated over ``model``."""
  return NamedSharding(mesh, P("data"))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())
