r"""A trained ViT evaluated, or briefly fine-tuned, at another image size.

A ViT's sequence length follows the resolution (``n = (size / patch)^2``
patches, plus the class token and registers), and several normalizers
depend on ``n`` (``relu_seqlen``'s ``n^-alpha``, sigmoid's ``-log n``,
ssmax's and LSSA's ``log n``); this config measures what that does to a
trained model:

  # evaluate only, at 48 x 48 (total_steps=0: no training step)
  python -m softattn.main --config=configs/transfer.py:from=/tmp/c10,size=48 \
      --workdir=/tmp/c10_at48
  # fine-tune 300 steps there first
  python -m softattn.main \
      --config=configs/transfer.py:from=/tmp/c10,size=48,steps=300 \
      --workdir=/tmp/c10_at48_ft

The base is the source run's ``config.json`` (model, data, loss, optimizer)
with:

* ``init_from.path`` = the source run (its latest checkpoint). A learned
  position embedding is resampled to the new patch grid, bilinearly
  (``softattn.models.vit.resample_posemb``); a sin-cos one is recomputed
  for the new grid by the model itself;
* ``data.image_size`` = ``size``: every image is resized to it as the last
  preprocessing op (``softattn.data.pipeline.pp_string``), so the same
  content is cut into more or fewer patches;
* ``total_steps`` = ``steps`` (0: evaluate only), AdamW from a fresh state,
  ``lr`` with a 10 % warmup then cosine to 0, one eval and one checkpoint at
  the end. The few-shot probe and the i21k->i1k eval are dropped (their
  data would need the size too).

Sweep-ready: the knobs are config fields, so a sweep declaration varies them
(``softattn.sweep.grid``), e.g.
``product(sweep("data.image_size", [16, 24, 48, 64]), sweep("total_steps",
[0, 300]))`` over ``get_config("from=<run>")``. The model must stay the
source's.

Args: ``from`` (the source run's workdir; empty: the quickstart config,
trained from scratch at ``size``: a smoke test of the data path, what the
tests run), ``size`` (32), ``steps`` (0 with ``from``; without it the
base's own length), ``lr`` (1e-4), ``runlocal`` (without ``from``: the
quickstart's 3-step smoke form).
"""

import os

import ml_collections
from ml_collections import config_dict

from softattn import config_files, config_schema, paths


def _source_config(workdir: str) -> ml_collections.ConfigDict:
  """The source run's ``config.json`` over the typed defaults (so that
  ``--config.<field>`` still parses into its type)."""
  saved = paths.read_json(paths.join(workdir, "config.json"))
  if saved is None:
    raise ValueError(f"from={workdir!r} holds no config.json; give the "
                     "workdir of a softattn run.")
  c = config_schema.default_config()
  for k, v in saved.items():
    if isinstance(v, dict) and isinstance(c.get(k), ml_collections.ConfigDict):
      for kk, vv in v.items():
        c[k][kk] = vv
    else:
      c[k] = v
  if c.data.get("data_dir") is None:
    c.data.data_dir = config_dict.placeholder(str)
  return c


def get_config(arg=None):
  a = config_files.parse_arg(arg, size=32, steps=-1, lr=1e-4, runlocal=False,
                             **{"from": ""})
  if a.size < 1:
    raise ValueError(f"size={a.size} is invalid; give the new image side in "
                     "pixels, e.g. size=48.")
  if a["from"]:
    c = _source_config(a["from"])
    c.init_from.path = a["from"]
    c.init_from.step = None
    c.init_from.skip = ""
    steps = max(a.steps, 0)
  else:
    c = config_files.load_file(
        os.path.join(os.path.dirname(os.path.abspath(__file__)),
                     "quickstart.py") + (":runlocal" if a.runlocal else ""),
        lock=False)
    steps = a.steps if a.steps >= 0 else c.total_steps
  c.data.image_size = a.size
  c.num_epochs = None
  c.total_steps = steps
  c.schedule.name = "warmup_cosine"
  c.schedule.base_lr = a.lr
  c.schedule.init_lr = 0.0
  c.schedule.end_lr = 0.0
  c.schedule.warmup_steps = steps // 10
  c.schedule.warmup_epochs = None
  c.eval_every = steps
  c.checkpoint_every = steps
  c.log_every = max(steps // 10, 1) if steps else 0
  c.fewshot.datasets = {}
  c.eval.i1k_from_i21k = False
  c.eval.i1k_data = None
  return c
