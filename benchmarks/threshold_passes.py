"""Key passes per row of the fused threshold search (sparsemax, entmax15),
before and after the bracket pass (``softattn/pallas/common/streams.py``).

    python benchmarks/threshold_passes.py     # writes benchmarks/results/threshold_passes.json

Each pass of the fused search streams every key block of a row once. The
count per row follows from the search's arithmetic alone, so it is computed
here on score rows in float32 (as the kernels sum), without the kernels:

* before (the fused path up to issue #46): ``n`` and ``sum z`` by two
  pointwise passes, ``tau_0 = mean z - n^(1-alpha)``, Newton steps of two
  passes each (``S0``, ``S1``), then 3 (one differentiable Newton step and
  the weighted pass): ``5 + 2 K``;
* after: one pass for ``max z, sum z, n``, one for ``S0, S1`` at
  ``EDGES`` candidates of the bracket (``streams.bracket``,
  ``streams.candidates``) and a Newton step from the best of them
  (``streams.start``), Newton steps of one pass each (``S0`` and ``S1``
  together), then the same 3: ``5 + K``.

``K``: steps until the row's step is within ``tol * (1 + |tau|)`` (the
defaults: ``tol = 1e-6``, at most ``max_passes = 20``), as
``softattn.streams.search_threshold`` stops; a call costs its slowest row's
count (the loop runs until every row is done). Rows: Gaussian scores (``n``
keys, standard deviation ``sigma``) and, when its checkpoint is on disk, the
scaled scores ``q.k / sqrt(d)`` of every layer and head of the softmax ViT
of the sinks study (``workdirs/sinks/main/seed-0__normalizer-softmax``,
which ``bash experiments/sinks/run.sh`` trains:
mu-size, 4 layers x 4 heads, 50 tokens, 200 steps on Fashion-MNIST) on 16
test images; that model is softmax-trained, so its rows are realistic score
distributions, not ones a sparsemax model learned.

Also the tiles the weighted pass skips (``streams.live_tiles``, step 5 of
``softattn/pallas/common/streams.py``): a (query block, key block) tile is
skipped when every row's max ``z`` over the block is at or below the
row's ``tau`` (the search's, then the differentiable Newton step's, as the
weighted pass reads it). Whole score maps are needed for that, not rows:
the Gaussian scores as ``[M, n, n]`` maps of the same i.i.d. entries
(``gaussian_maps``), and the ViT's ``[50, 50]`` maps per image and head.
Tilings: 128 x 128, the block rule's for D = 64 bf16 on a v5e (what the
weighted pass would run), and one query row by 128 keys (the bound no
query block size can beat); for the ViT's 50 tokens also 16 x 16, finer
than any TPU block. Counted per head (a kernel block of two heads is live
where either is: fewer skipped).
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from softattn.modes import NEG
from softattn.pallas.common import streams as fused
from softattn.pallas.tpu import blocks
from softattn.streams import _power, newton_step

VIT = "workdirs/sinks/main/seed-0__normalizer-softmax"
NORMALIZERS = {"sparsemax": 2.0, "entmax15": 1.5}
MAX_PASSES, TOL = 20, 1e-6


def _sums(z, valid, tau, pw):
  """``S0, S1`` of each row at ``tau`` ``[R, 1]`` (one pass of the kernels)."""
  x = jnp.where(valid, jax.nn.relu(z - tau), 0.0)
  return (jnp.sum(_power(x, pw), -1, keepdims=True),
          jnp.sum(_power(x, pw - 1.0), -1, keepdims=True))


def newton_steps(z, valid, tau, pw):
  """``(K, tau)`` per row: Newton steps from ``tau`` until the step is within
  ``TOL * (1 + |tau|)``, at most ``MAX_PASSES`` (``search_threshold``'s rule,
  row by row)."""
  steps = jnp.full(tau.shape, MAX_PASSES, jnp.int32)
  for i in range(MAX_PASSES):
    s0, s1 = _sums(z, valid, tau, pw)
    tau, step = newton_step(tau, s0, s1, pw)
    done = jnp.abs(step) <= TOL * (1.0 + jnp.abs(tau))
    steps = jnp.where(done & (steps == MAX_PASSES), i + 1, steps)
  return steps[:, 0], tau


def before(z, valid, alpha):
  a1, pw = alpha - 1.0, 1.0 / (alpha - 1.0)
  n = jnp.maximum(jnp.sum(valid, -1, keepdims=True).astype(z.dtype), 1.0)
  tau0 = jnp.sum(jnp.where(valid, z, 0.0), -1, keepdims=True) / n - n ** (-a1)
  k, tau = newton_steps(z, valid, tau0, pw)
  return 5 + 2 * k, tau


def after(z, valid, alpha, edges=fused.EDGES):
  a1, pw = alpha - 1.0, 1.0 / (alpha - 1.0)
  zmax = jnp.max(jnp.where(valid, z, -1e30), -1, keepdims=True)
  zsum = jnp.sum(jnp.where(valid, z, 0.0), -1, keepdims=True)
  n = jnp.sum(valid, -1, keepdims=True).astype(z.dtype)
  lo, hi = fused.bracket(zmax, zsum, n, a1)
  taus = fused.candidates(lo, hi, edges)
  s0, s1 = jax.vmap(lambda t: _sums(z, valid, t[:, None], pw), 1, 2)(taus)
  tau1 = fused.start(taus, s0[:, 0], s1[:, 0], pw)
  k, tau = newton_steps(z, valid, tau1, pw)
  return 5 + k, tau


def gaussian_rows(seed=0):
  """``{name: (scores [R, n], valid)}``: 32 rows per (n, sigma)."""
  rng = np.random.default_rng(seed)
  out = {}
  for n in (196, 1024, 4096):
    for sigma in (0.5, 1.0, 2.0, 4.0, 8.0):
      s = (sigma * rng.standard_normal((32, n))).astype(np.float32)
      out[f"gauss n={n} sigma={sigma}"] = (s, np.ones_like(s, bool))
  return out


def vit_rows(scores):
  """``{"vit layer l": (scores [R, 50], valid)}`` of ``vit_scores``."""
  return {f"vit layer {i}": (s.reshape(-1, s.shape[-1]),
                             np.ones(s.reshape(-1, s.shape[-1]).shape, bool))
          for i, s in enumerate(scores)}


def vit_scores(workdir=VIT, images=16):
  """The trained ViT's scaled scores, one ``[images, heads, 50, 50]`` f32
  array per layer, or [] when its checkpoint or Fashion-MNIST is not on
  this machine."""
  if not os.path.isdir(os.path.join(workdir, "checkpoints")):
    return []
  import tensorflow_datasets as tfds  # noqa: PLC0415
  from softattn import configlib, init_from  # noqa: PLC0415
  import softattn.nn.attention as layer  # noqa: PLC0415
  with open(os.path.join(workdir, "config.json")) as f:
    cfg = json.load(f)
  model = configlib.build_model(cfg, image_shape=(28, 28, 1))
  params = init_from.read_orbax(workdir)["params"]
  batch = next(iter(tfds.as_numpy(tfds.load(
      "fashion_mnist", split=f"test[:{images}]", batch_size=images))))
  x = batch["image"].astype(np.float32) / 127.5 - 1.0   # value_range(-1, 1)
  scores, attend = [], layer.dot_product_attention

  def record(q, k, v, **kw):
    scale = kw.get("scale") or q.shape[-1] ** -0.5
    scores.append(np.einsum("bqhd,bkhd->bhqk", np.asarray(q),
                            np.asarray(k)) * scale)
    return attend(q, k, v, **kw)

  layer.dot_product_attention = record
  try:
    logits = model.apply({"params": params}, x)
  finally:
    layer.dot_product_attention = attend
  acc = float(np.mean(np.argmax(np.asarray(logits), -1) == batch["label"]))
  print(f"ViT: {len(scores)} layers, accuracy {acc:.2f} on {images} images")
  return [s.astype(np.float32) for s in scores]


def measure(rows, edges_variants=(4, 8, 16)):
  table = []
  for name, (s, valid) in rows.items():
    for norm, alpha in NORMALIZERS.items():
      z, valid = jnp.asarray((alpha - 1.0) * s), jnp.asarray(valid)
      old, tau_old = before(z, valid, alpha)
      row = dict(rows=name, normalizer=norm, n_rows=int(s.shape[0]),
                 before=_stats(old))
      for e in edges_variants:
        new, tau_new = after(z, valid, alpha, e)
        row[f"after E={e}"] = _stats(new)
        row[f"tau diff E={e}"] = float(jnp.max(
            jnp.abs(tau_new - tau_old) / (1.0 + jnp.abs(tau_old))))
      table.append(row)
  return table


def summary(table, e):
  """Per group of rows (Gaussian by ``n``, the ViT's layers together) and
  normalizer: mean and max passes per row, before and after."""
  groups = collections.defaultdict(list)
  for r in table:
    group = r["rows"].split(" sigma")[0].split(" layer")[0]
    groups[(group, r["normalizer"])].append(r)
  lines = ["| rows | normalizer | passes per row before: mean (max) | after: "
           "mean (max) |", "|---|---|---|---|"]
  for (group, norm), rs in groups.items():
    w = np.array([r["n_rows"] for r in rs], float)
    cells = []
    for key in ("before", f"after E={e}"):
      mean = np.sum(w * [r[key]["mean"] for r in rs]) / w.sum()
      cells.append(f"{mean:.1f} ({max(r[key]['max'] for r in rs)})")
    lines.append(f"| {group} | {norm} | {cells[0]} | {cells[1]} |")
  return "\n".join(lines)


# -- tiles the weighted pass skips (streams.live_tiles, step 5) --------------
# The weighted pass's blocks by the block rule for ViT-B/16-like heads
# (D = 64, two heads per block, bfloat16) on this chip.
SKIP_CHIP, SKIP_D = "v5e", 64


@functools.partial(jax.jit, static_argnums=2)
def weighted_tau(z, valid, alpha):
  """The tau the weighted pass reads per row, ``[R, 1]``: the search's
  (``after``), then the differentiable Newton step's."""
  pw = 1.0 / (alpha - 1.0)
  _, tau = after(z, valid, alpha)
  s0, s1 = _sums(z, valid, tau, pw)
  return newton_step(tau, s0, s1, pw)[0]


def skipped(z, valid, tau, bq, bk):
  """Fraction of the ``(map, query block, key block)`` tiles of ``z [M,
  Lq, Lk]`` that ``streams.live_tiles`` marks dead at ``tau [M, Lq, 1]``
  (one head per tile: the kernels' blocks of two heads are live where
  either is)."""
  m, lq, lk = z.shape
  nk = -(-lk // bk)
  zm = jnp.pad(jnp.where(valid, z, NEG), ((0, 0), (0, 0), (0, nk * bk - lk)),
               constant_values=NEG)
  bmax = jnp.max(zm.reshape(m, lq, nk, bk), axis=-1)
  return float(1.0 - jnp.mean(fused.live_tiles(bmax[None], tau[None], bq)))


def tilings(n):
  """``(label, bq, bk)``: 128 x 128 tiles, the block rule's (``SKIP_CHIP``,
  ``SKIP_D``), and one query row by 128 keys (what no query block size can
  beat); for short rows (the ViT's 50) also 16 x 16, finer than a TPU block
  (at least 128 keys, or the whole row)."""
  bq, bk = blocks.block_sizes(n, n, SKIP_D, SKIP_D, jnp.bfloat16, SKIP_CHIP,
                              hp=2)
  out = [("128x128", min(128, n), min(128, n)),
         (f"{SKIP_CHIP} rule {bq}x{bk}", bq, bk), ("1x128", 1, min(128, n))]
  if n < 128:
    out += [("16x16", 16, 16), ("1x16", 1, 16)]
  return out


def gaussian_maps(seed=0):
  """``{name: scores [M, n, n]}``: the Gaussian rows of ``gaussian_rows``
  (i.i.d., ``n`` keys, standard deviation ``sigma``) as whole score maps,
  ``M = 4096 / n`` of them (at least one), ~4096 query rows each."""
  rng = np.random.default_rng(seed)
  return {f"gauss n={n} sigma={sigma}": (sigma * rng.standard_normal(
      (max(1, 4096 // n), n, n))).astype(np.float32)
          for n in (196, 1024, 4096) for sigma in (0.5, 1.0, 2.0, 4.0, 8.0)}


def measure_skips(maps, chunk=256):
  """One entry per (maps, normalizer, tiling): the fraction skipped."""
  table = []
  for name, s in maps.items():
    m, lq, lk = s.shape
    for norm, alpha in NORMALIZERS.items():
      z = jnp.asarray((alpha - 1.0) * s)
      valid = jnp.ones(z.shape, bool)
      rows, ok = z.reshape(-1, lk), valid.reshape(-1, lk)
      tau = jnp.concatenate([weighted_tau(rows[i:i + chunk], ok[i:i + chunk],
                                          alpha)
                             for i in range(0, rows.shape[0], chunk)])
      tau = tau.reshape(m, lq, 1)
      for label, bq, bk in tilings(lk):
        table.append(dict(rows=name, normalizer=norm, maps=m, tiles=label,
                          bq=bq, bk=bk,
                          skipped=skipped(z, valid, tau, bq, bk)))
  return table


def skip_summary(table):
  """Per group (Gaussian by ``n``, the ViT's layers together), normalizer
  and tiling: mean and max of the fraction skipped over its maps."""
  groups = collections.defaultdict(list)
  for r in table:
    group = r["rows"].split(" sigma")[0].split(" layer")[0]
    groups[(group, r["normalizer"], r["tiles"])].append(r["skipped"])
  lines = ["| rows | normalizer | tiles (q x k) | skipped: mean (max) |",
           "|---|---|---|---|"]
  for (group, norm, tiles), fr in groups.items():
    lines.append(f"| {group} | {norm} | {tiles} | {100 * np.mean(fr):.1f} % "
                 f"({100 * max(fr):.1f} %) |")
  return "\n".join(lines)


def _fmt(d):
  return f"{d['mean']:.1f} / {d['median']:.0f} / {d['max']}"


def _stats(passes):
  p = np.asarray(passes)
  return dict(mean=float(p.mean()), median=float(np.median(p)),
              max=int(p.max()))


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--out", default="benchmarks/results/threshold_passes.json")
  ap.add_argument("--no-vit", action="store_true")
  args = ap.parse_args(argv)
  rows = gaussian_rows()
  vit = [] if args.no_vit else vit_scores()
  if not vit and not args.no_vit:
    print(f"no trained ViT at {VIT}: Gaussian rows only")
  rows.update(vit_rows(vit))
  table = measure(rows)
  e = fused.EDGES
  print(summary(table, e))
  print(f"| rows | normalizer | before: mean / median / max | after (E={e}): "
        "mean / median / max | after E=4 max | after E=16 max | "
        "max tau diff |")
  print("|---|---|---|---|---|---|---|")
  for r in table:
    print(f"| {r['rows']} | {r['normalizer']} | {_fmt(r['before'])} | "
          f"{_fmt(r[f'after E={e}'])} | {r['after E=4']['max']} | "
          f"{r['after E=16']['max']} | {r[f'tau diff E={e}']:.1e} |")
  maps = gaussian_maps()
  maps.update({f"vit layer {i}": s.reshape(-1, *s.shape[2:])
               for i, s in enumerate(vit)})
  skips = measure_skips(maps)
  print(skip_summary(skips))
  os.makedirs(os.path.dirname(args.out), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(dict(jax=jax.__version__, max_passes=MAX_PASSES, tol=TOL,
                   edges=e, table=table, live_margin=fused.LIVE_MARGIN,
                   skip=skips), f, indent=1)


if __name__ == "__main__":
  main()
