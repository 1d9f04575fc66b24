r"""Element-wise attention study (Baco China et al. 2023): Table 1 + appendix.

Paper: Baco China & de Souza 2023, "Element-Wise Attention Layers: an option
for optimization". Its recipe is small and is used at both scales: 10
epochs, batch 4096 (Fashion-MNIST; 1024 for CIFAR-10), Adam lr 1e-3
(default betas, constant), every weight N(0, 0.02), biases 0, categorical
cross-entropy, pixels in [0, 1], no augmentation.

Three parts (``part=``), as the models differ in their config sections (a
sweep overrides leaves of one base config):

* ``part=models`` (default): Table 1's attention models A-H (heads 8/16,
  layers 2/4, BN after the conv on/off; ``head_groups`` as the model presets
  to match the paper's parameter counts), the appendix's single-head model
  (1 head, 2 layers, BN: the paper's "11,132" model) and model B without
  the skip connection on the plain optimizer;
* ``part=control``: the VGG-like control (929,510 parameters);
* ``part=separate``: the appendix's separate optimizers (Adam lr 0.1 for
  the attention weights ``x_weights``/``y_weights``, Adam 1e-3 for the rest)
  on model B with and without the skip connection.

Scales:

* ``scale=reduced`` (default; this CPU): Fashion-MNIST, the paper's recipe
  for ``epochs`` (default 1, i.e. 15 steps; the paper trains 10) x 2
  seeds. Measured: a train step of model A at batch 4096 takes ~6 s on the
  2-core CPU (XLA counts only 6.1 GFLOP, but the exp-heavy element-wise
  backward is memory-bound on XLA:CPU), so the paper's 10 epochs x 3 seeds
  would take ~25 CPU-hours for the 36 runs; 1 epoch x 2 seeds took 29
  minutes with ``--parallel=2``; a 10-epoch run takes 5-25 minutes, an
  attention-free one (``layers=0``) under a minute. The control (XLA: 4.4
  TFLOP per train step of 4096) trains as many epochs as the attention
  models, 1 seed, and runs only with ``CONTROL=1``: 1 epoch took 70
  CPU-minutes, 42 minutes alone on 2 cores, ~12 GB. Its 1-step timing
  runs (``control_epochs=0.05,control_seeds=3``), measured 2026-11-26 with
  ``--parallel=1`` on a machine shared with two other trainings: 474-514
  CPU core-seconds per run (compilation, the step and one test-set
  evaluation), 12-14 minutes of wall time each, ~12 GB each (so
  ``--parallel=2`` needs ~25 GB). ``lr=0.1`` (model B, 1 epoch): 88-93 s
  a run with ``--parallel=1``.
* ``scale=full``: as the paper; ``dataset=cifar10`` gives the CIFAR-10
  runs (batch 1024); ``seeds`` default 1 (the paper reports single runs).

``report.py``'s ``STUDY`` declares the parts run here (the 10-epoch
subsets, the attention-free baseline, the control's timing runs) and
``run.sh`` runs them (with the measured totals):

  python -m softattn.sweep run experiments/elementwise/sweep.py:part=models \
      --workdir=workdirs/elementwise/models
  python experiments/elementwise/report.py --workdir=workdirs/elementwise

Args (``sweep.py:<k>=<v>,...``): ``part``, ``scale``, ``dataset`` (full:
fashion_mnist|cifar10), ``seeds``, ``epochs`` (reduced; full is 10),
``control_epochs`` (reduced: default ``epochs``), ``control_seeds``;
``variants`` (part=models: which of A-H, e.g. ``ABC``, or ``none`` for the
extras alone), ``extras`` (part=models: also the single-head and no-skip
models: ``true``, the default, both; ``single`` or ``noskip``, one;
``false``, neither), ``skips`` (part=separate: ``both``, ``skip`` or
``noskip``), ``layers`` (part=models: every model's number of attention
layers; 0 = attention-free, the Dense head on the pixels; default -1, the
presets'), ``noskip_seeds`` (part=models: seeds of the no-skip model, whose
collapse, an event claim, needs 3; default ``seeds``), ``lr`` (Adam's
learning rate on every weight; default the paper's 1e-3).
"""

from ml_collections import config_dict

from softattn import configlib
from softattn.models.elementwise import PRESETS
from softattn.sweep import grid

PARTS = ("models", "control", "separate")
VARIANTS = list("ABCDEFGH")
# Adam lr 0.1 for the element-wise attention weights (paper appendix).
ATTN_GROUP = dict(pattern="(x|y)_weights", name="adam", base_lr=0.1)
# part=separate: which of model B with / without the skip connection.
SKIPS = {"both": [True, False], "skip": [True], "noskip": [False]}
# part=models: which extra models (besides Table 1's A-H) a part holds.
EXTRAS = {"true": ("single", "noskip"), "false": (), "single": ("single",),
          "noskip": ("noskip",)}


def _arg(arg):
  a = configlib.parse_arg(arg, part="models", scale="reduced",
                          dataset="fashion_mnist", seeds=0, epochs=1.0,
                          control_epochs=0.0, control_seeds=0,
                          variants="".join(VARIANTS), extras="true",
                          skips="both", layers=-1, noskip_seeds=0, lr=1e-3)
  if a.part not in PARTS:
    raise ValueError(f"part={a.part!r}; use one of {', '.join(PARTS)}")
  if a.extras not in EXTRAS:
    raise ValueError(f"extras={a.extras!r}; use one of {', '.join(EXTRAS)}")
  a.variants = "" if a.variants == "none" else a.variants
  bad = sorted(set(a.variants) - set(VARIANTS))
  if bad or not (a.variants or EXTRAS[a.extras]):
    raise ValueError(f"variants={a.variants!r}; use letters of "
                     f"{''.join(VARIANTS)}, e.g. variants=ABC (or "
                     "variants=none with extras=single or noskip)")
  if a.skips not in SKIPS:
    raise ValueError(f"skips={a.skips!r}; use one of {', '.join(SKIPS)}")
  if a.layers >= 0 and a.part != "models":
    raise ValueError("layers= applies to part=models only")
  if not a.lr > 0:
    raise ValueError(f"lr={a.lr}; use a positive learning rate, e.g. lr=0.1")
  if a.scale not in ("reduced", "full"):
    raise ValueError(f"scale={a.scale!r}; use scale=reduced or scale=full")
  full = a.scale == "full"
  a.seeds = a.seeds or (1 if full else 2)
  a.noskip_seeds = a.noskip_seeds or a.seeds
  if full:
    a.epochs = 10.0
  # Reduced: the control trains as long as the attention models (a fair
  # comparison at equal budget); full: the paper's 10 epochs.
  a.control_epochs = a.control_epochs or (10.0 if full else a.epochs)
  a.control_seeds = a.control_seeds or (a.seeds if full else 1)
  return a


def get_config(arg=None):
  a = _arg(arg)
  c = configlib.default_config()
  c.num_epochs = float(a.epochs)
  c.data.name = a.dataset if a.scale == "full" else "fashion_mnist"
  c.batch_size = 1024 if c.data.name == "cifar10" else 4096
  c.data.data_dir = config_dict.placeholder(str)
  c.data.train_split = "train"
  c.data.eval_split = "test"
  c.data.pp_train = "value_range(0, 1)"   # torchvision ToTensor()
  c.data.pp_eval = "value_range(0, 1)"
  c.data.shuffle_buffer = 60_000
  c.data.cache = True

  if a.part == "control":
    c.model_name = "vgg_control"
    c.model.init_std = 0.02
    c.num_epochs = float(a.control_epochs)
  else:
    c.model_name = "elementwise"
    # Every field explicit (a preset's fields are None only to be filled by
    # the preset), so that runs can override them; head_groups 0 = concat.
    c.model.variant = "B"
    c.model.heads, c.model.layers, c.model.bn = 8, 2, False
    c.model.head_groups = 0
    c.model.skip = True
    c.model.init_std = 0.02

  c.optimizer.name = "adam"
  if a.part == "separate":
    c.optimizer.groups = [dict(ATTN_GROUP)]
  c.schedule.name = "constant"
  c.schedule.base_lr = float(a.lr)
  c.loss.name = "softmax_xent"

  # Once per epoch (the paper's curves): 15 steps of 4096 on Fashion-MNIST;
  # a short reduced run logs every 5 steps. Diagnostics on: the per-layer
  # gradient norms (the paper's "last gradients" column) are logged with
  # them, at every log step.
  per_epoch = 15 if c.batch_size == 4096 else 49
  c.log_every = c.eval_every = per_epoch
  if a.scale == "reduced" and a.epochs < 3:
    c.log_every = 5
  # A 10-epoch reduced run takes 10-40 minutes here: checkpoint every epoch
  # so that an interrupted one resumes (a 1-epoch run only at its end).
  c.checkpoint_every = per_epoch if a.epochs >= 3 else 1000
  c.keep_checkpoints = 1
  c.diagnostics = True
  c.eval.batch_size = 1000
  return c


def _arch(variant, heads, layers, bn, groups):
  return {"model.variant": variant, "model.heads": heads,
          "model.layers": layers, "model.bn": bn,
          "model.head_groups": groups or 0}


def get_sweep(arg=None):
  a = _arg(arg)
  if a.part == "control":
    return grid.sweep("seed", list(range(a.control_seeds)))
  seeds = grid.sweep("seed", list(range(a.seeds)))
  if a.part == "separate":
    return grid.product(grid.sweep("model.skip", SKIPS[a.skips]), seeds)
  archs = [_arch(v, *PRESETS[v]) for v in VARIANTS if v in a.variants]
  if "single" in EXTRAS[a.extras]:
    archs.append(_arch("A", 1, 2, True, 0))             # single head
  if "noskip" in EXTRAS[a.extras]:
    archs.append({**_arch("B", *PRESETS["B"]), "model.skip": False})
  archs = [{**o, "model.skip": o.get("model.skip", True)} for o in archs]
  if a.layers >= 0:
    # layers=0: no attention layer at all, Dense on the pixels (ReLU of
    # pixels in [0, 1] is the identity): the attention-free baseline.
    archs = [{**o, "model.layers": a.layers} for o in archs]
  # The no-skip model on one optimizer may get more seeds than the others
  # (its collapse is an event claim that needs 3), without adding seeds to
  # every other setting of the part.
  n = lambda o: a.noskip_seeds if not o["model.skip"] else a.seeds
  return grid.chain(*[grid.product([o], grid.sweep("seed", range(n(o))))
                      for o in archs])
