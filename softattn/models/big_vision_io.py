"""Load (and write) big_vision ViT ``.npz`` checkpoints.

A big_vision ``.npz`` holds the flattened parameter tree, keys joined by
``/`` (``Transformer/encoderblock_0/MultiHeadDotProductAttention_0/query/
kernel``). ``softattn.models.vit.ViT`` uses big_vision's module names, so the
mapping is the identity except:

===============================================  ==============================
big_vision key                                   ours
===============================================  ==============================
``pre_logits/{kernel,bias}``                     ``pre_logits_dense/...`` (flax
                                                 forbids a module named like
                                                 the sown ``pre_logits``)
``Transformer/encoderblock_{i}/...``             same, or stacked on axis 0 as
                                                 ``Transformer/encoderblock``
                                                 when ``scan=True`` (either
                                                 layout loads into either)
``Transformer/posembed_input/pos_embedding``,    ``pos_embedding`` (older
``Transformer/pos_embedding``                    layouts)
``pos_embedding`` with ``1 + h*w`` rows          split: row 0 added to ``cls``
                                                 (as big_vision does), unless
                                                 the model has
                                                 ``posemb_with_cls=True``
===============================================  ==============================

A different grid size (e.g. fine-tuning at a higher resolution) resamples the
position embedding bilinearly (``softattn.models.vit.resample_posemb``).
Register tokens (``registers``, ``num_registers > 0``) are not in big_vision's
ViT: a checkpoint without them loads into a model with them only with
``dont_load=("registers",)`` (fresh registers), and the error says so.
Parameters only softattn has (learnable
normalizer parameters ``norm_*``, the gate, ``query_ln``/``key_ln``) are taken
from the model's own init; anything else missing, any unexpected key, or a
shape mismatch raises ``ValueError`` naming the keys (``dont_load`` lists
regexes of keys to take from init instead, e.g. ``("head/.*",)`` for a new
number of classes).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from softattn.models.vit import PRE_LOGITS, resample_posemb

OURS_ONLY = re.compile(r"(^|/)(norm_[^/]+|gate|query_ln|key_ln)(/|$)")


def flatten(tree: Mapping, prefix: str = "") -> dict[str, Any]:
  """``{"a": {"b": x}}`` -> ``{"a/b": x}``."""
  out = {}
  for k, v in tree.items():
    key = f"{prefix}{k}"
    if isinstance(v, Mapping):
      out.update(flatten(v, key + "/"))
    else:
      out[key] = v
  return out


def unflatten(flat: Mapping[str, Any]) -> dict:
  """``{"a/b": x}`` -> ``{"a": {"b": x}}``."""
  out: dict = {}
  for key, v in flat.items():
    node = out
    *path, leaf = key.split("/")
    for p in path:
      node = node.setdefault(p, {})
    node[leaf] = v
  return out


def save_big_vision_npz(path, params: Mapping) -> None:
  """Writes ``params`` (a ViT's) as a big_vision ``.npz`` (per-layer blocks,
  ``pre_logits`` renamed back)."""
  flat = flatten(_unscan(_to_dict(params)))
  flat = {_rename(k, PRE_LOGITS, "pre_logits"): np.asarray(v)
          for k, v in flat.items()}
  with open(path, "wb") as f:
    np.savez(f, **flat)


def load_big_vision_npz(path, model, *, image_size: int | None = None,
                        params: Mapping | None = None,
                        dont_load: Iterable[str] = (), rng=None) -> dict:
  """Parameters of ``model`` (a ``ViT``) from the big_vision ``.npz`` at
  ``path``.

  Args:
    path: file path or file object of the ``.npz``.
    model: the ``softattn.models.vit.ViT`` to load into (any variant fields,
      ``scan`` on or off).
    image_size: input resolution the model will run at; default: the
      checkpoint's (``sqrt(posemb rows) * patch``, or 224 without a learned
      posemb). The position embedding is resampled to match.
    params: the model's initial parameters, if already made (saves an init).
    dont_load: regexes of flattened keys to take from init instead.
    rng: init rng (default ``PRNGKey(0)``) for keys taken from init.

  Returns:
    a nested dict of parameters for ``model.apply({"params": ...}, x)``.
  """
  with np.load(path, allow_pickle=False) as f:
    ckpt = {k: np.asarray(f[k]) for k in f.files}
  ckpt = {_rename(k, "pre_logits", PRE_LOGITS): v for k, v in ckpt.items()}
  for old in ("Transformer/posembed_input/pos_embedding",
              "Transformer/pos_embedding"):
    if old in ckpt:
      ckpt["pos_embedding"] = ckpt.pop(old)
  arch = model._arch()  # pylint: disable=protected-access
  if params is None:
    size = image_size or _checkpoint_image_size(ckpt, arch["patch_size"])
    x = jnp.zeros((1, size, size, 3), jnp.float32)
    init = lambda: model.init(rng if rng is not None else jax.random.key(0),
                              x)["params"]
    template = flatten(_to_dict(jax.eval_shape(init)))
  else:
    init = lambda: params
    template = flatten(_to_dict(params))
  scanned = any(k.startswith("Transformer/encoderblock/") for k in template)
  tree = unflatten(ckpt)
  tree = _scan(tree) if scanned else _unscan(tree)
  ckpt = flatten(tree)
  _fix_posemb(ckpt, template)

  patterns = [re.compile(p) for p in dont_load]
  skip = lambda k: any(p.fullmatch(k) for p in patterns)
  _check_registers(ckpt, template, skip)
  from_init = [k for k in template
               if (k not in ckpt and OURS_ONLY.search(k)) or skip(k)]
  missing = [k for k in template
             if k not in ckpt and k not in from_init]
  unexpected = [k for k in ckpt if k not in template and not skip(k)]
  wrong = [f"{k}: checkpoint {ckpt[k].shape} vs model {template[k].shape}"
           for k in template if k in ckpt and k not in from_init
           and tuple(ckpt[k].shape) != tuple(template[k].shape)]
  if missing or unexpected or wrong:
    raise ValueError(
        "big_vision checkpoint does not fit the model "
        f"(variant/pool/rep_size/num_classes?): missing {missing[:8]}, "
        f"unexpected {unexpected[:8]}, shape mismatches {wrong[:8]}; pass "
        f"dont_load=(regex, ...) to re-initialise keys such as 'head/.*'")
  out = {k: jnp.asarray(ckpt[k], template[k].dtype) for k in template
         if k not in from_init}
  if from_init:
    fresh = flatten(_to_dict(init()))
    out.update({k: fresh[k] for k in from_init})
  return unflatten(out)


def _to_dict(tree):
  if isinstance(tree, Mapping):
    return {k: _to_dict(v) for k, v in tree.items()}
  return tree


def _rename(key, old, new):
  parts = key.split("/")
  return "/".join(new if (i == 0 and p == old) else p
                  for i, p in enumerate(parts))


def _checkpoint_image_size(ckpt, patch):
  pe = ckpt.get("pos_embedding")
  if pe is None:
    return 224
  rows = pe.shape[1]
  g = int(round(np.sqrt(rows)))
  if g * g != rows:
    g = int(round(np.sqrt(rows - 1)))
  return g * patch[0]


def _scan(tree):
  """Per-layer ``encoderblock_{i}`` -> stacked ``encoderblock``."""
  t = dict(tree.get("Transformer", {}))
  idx = sorted(int(k.rsplit("_", 1)[1]) for k in t
               if re.fullmatch(r"encoderblock_\d+", k))
  if idx:
    blocks = [t.pop(f"encoderblock_{i}") for i in idx]
    t["encoderblock"] = jax.tree.map(lambda *a: np.stack(a), *blocks)
    tree = {**tree, "Transformer": t}
  return tree


def _unscan(tree):
  """Stacked ``encoderblock`` -> per-layer ``encoderblock_{i}``."""
  t = dict(tree.get("Transformer", {}))
  if "encoderblock" in t:
    stacked = t.pop("encoderblock")
    depth = jax.tree.leaves(stacked)[0].shape[0]
    for i in range(depth):
      t[f"encoderblock_{i}"] = jax.tree.map(lambda a, i=i: a[i], stacked)
    tree = {**tree, "Transformer": t}
  return tree


def _fix_posemb(ckpt, template):
  if "pos_embedding" not in ckpt or "pos_embedding" not in template:
    return
  pe = ckpt["pos_embedding"]
  want = template["pos_embedding"].shape[1]
  cls_row = None
  grid = lambda n: int(round(np.sqrt(n))) ** 2 == n
  if not grid(pe.shape[1]) and grid(pe.shape[1] - 1):
    cls_row, pe = pe[:, :1], pe[:, 1:]
  with_cls = not grid(want) and grid(want - 1)
  n_grid = want - 1 if with_cls else want
  if pe.shape[1] != n_grid:
    pe = _resample(pe, n_grid)
  if with_cls:
    first = cls_row if cls_row is not None else np.zeros_like(pe[:, :1])
    pe = np.concatenate([first, pe], 1)
  elif cls_row is not None and "cls" in ckpt:
    # Old checkpoints added the posemb after prepending cls: fold it in.
    ckpt["cls"] = ckpt["cls"] + cls_row
  ckpt["pos_embedding"] = pe


def _resample(pe, n):
  """Bilinear resize of a square ``[1, g*g, D]`` posemb grid to ``n`` rows."""
  g = int(round(np.sqrt(n)))
  return resample_posemb(pe, (g, g))


def _check_registers(ckpt, template, skip) -> None:
  """One line naming the fix when the checkpoint's register tokens and the
  model's differ (big_vision's ViT has none)."""
  have = ckpt["registers"].shape[1] if "registers" in ckpt else 0
  want = template["registers"].shape[1] if "registers" in template else 0
  if have == want or skip("registers"):
    return
  if not have:
    raise ValueError(
        f"the checkpoint has no register tokens (big_vision's ViT has none) "
        f"but the model has num_registers={want}: pass "
        f"dont_load=('registers',) to start them from their init "
        f"(config: init_from.skip='registers'), or set num_registers=0")
  raise ValueError(f"the checkpoint has {have} register tokens but the model "
                   f"has num_registers={want}: set num_registers={have}, or "
                   f"pass dont_load=('registers',) to start them from init")
