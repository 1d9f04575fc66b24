r"""Element-wise attention study: Table 1 and the appendix.

Paper: Baco China & de Souza 2023, "Element-Wise Attention Layers: an option
for optimization". Its small recipe (10 epochs, batch 4096 or 1024 on
CIFAR-10, Adam 1e-3 constant, N(0, 0.02) init, pixels in [0, 1], no
augmentation) is used at both scales. Setup and budgets: RESULTS.md.

Parts (``part=``; their models differ in their config sections):
``models`` (default), Table 1's A-H (``PRESETS``), the appendix's single-head
model and B without skip; ``control``, the VGG-like control; ``separate``,
the appendix's separate optimizers (``ATTN_GROUP``) on B with and without
skip. ``scale=full``: the paper's 10 epochs, 1 seed; ``dataset=cifar10``.
The parts ``report.py`` declares and ``run.sh`` runs: RESULTS.md.

Measured here (2 cores): a train step of model A takes ~6 s (XLA counts 6.1
GFLOP; the exp-heavy backward is memory-bound on XLA:CPU). The control (4.4
TFLOP per step) trains only with ``CONTROL=1``: 1 epoch took 70 CPU-minutes,
42 minutes alone, ~12 GB; its 1-step runs (``control_epochs=0.05``) 474-514
core-seconds and ~12 GB each (``--parallel=2`` needs ~25 GB).

  python -m softattn.sweep run experiments/elementwise/sweep.py:part=models \
      --workdir=workdirs/elementwise/models
  python experiments/elementwise/report.py --workdir=workdirs/elementwise

Args: ``part``, ``scale``, ``dataset`` (full: fashion_mnist|cifar10),
``seeds``, ``epochs`` (reduced: 1), ``control_epochs`` (default ``epochs``),
``control_seeds``, ``lr`` (Adam's, every weight; 1e-3); part=models:
``variants`` (letters of A-H, or ``none``), ``extras`` (``EXTRAS``),
``layers`` (0 = attention-free; -1, the presets'), ``noskip_seeds`` (the
no-skip model's collapse, an event claim, needs 3); part=separate:
``skips`` (``SKIPS``).
"""

from softattn import config_files
from softattn.models.elementwise import PRESETS
from softattn.sweep import declaration, grid

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
  a = config_files.parse_arg(arg, part="models", scale="reduced",
                          dataset="fashion_mnist", seeds=0, epochs=1.0,
                          control_epochs=0.0, control_seeds=0,
                          variants="".join(VARIANTS), extras="true",
                          skips="both", layers=-1, noskip_seeds=0, lr=1e-3)
  declaration.check_choices(a, part=PARTS, skips=SKIPS,
                            scale=declaration.SCALES)
  if a.extras not in EXTRAS:
    raise ValueError(f"extras={a.extras!r}; use one of {', '.join(EXTRAS)}")
  a.variants = "" if a.variants == "none" else a.variants
  bad = sorted(set(a.variants) - set(VARIANTS))
  if bad or not (a.variants or EXTRAS[a.extras]):
    raise ValueError(f"variants={a.variants!r}; use letters of "
                     f"{''.join(VARIANTS)}, e.g. variants=ABC (or "
                     "variants=none with extras=single or noskip)")
  if a.layers >= 0 and a.part != "models":
    raise ValueError("layers= applies to part=models only")
  if not a.lr > 0:
    raise ValueError(f"lr={a.lr}; use a positive learning rate, e.g. lr=0.1")
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
  data = a.dataset if a.scale == "full" else "fashion_mnist"
  c = declaration.image_config(   # pixels in [0, 1], as torchvision ToTensor()
      data, "value_range(0, 1)", "value_range(0, 1)", shuffle_buffer=60_000,
      num_epochs=float(a.epochs),
      batch_size=1024 if data == "cifar10" else 4096)

  if a.part == "control":
    c.model_name = "vgg_control"
    c.num_epochs = float(a.control_epochs)
  else:
    c.model_name = "elementwise"
    # Every field explicit (a preset's fields are None only to be filled by
    # the preset), so that runs can override them; head_groups 0 = concat.
    c.model.update(variant="B", heads=8, layers=2, bn=False, head_groups=0,
                   skip=True)
  c.model.init_std = 0.02
  c.optimizer.name = "adam"
  if a.part == "separate":
    c.optimizer.groups = [dict(ATTN_GROUP)]
  c.schedule.update(name="constant", base_lr=float(a.lr))
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


def _arch(variant, heads, layers, bn, groups, skip=True):
  return {"model.variant": variant, "model.heads": heads,
          "model.layers": layers, "model.bn": bn,
          "model.head_groups": groups or 0, "model.skip": skip}


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
    archs.append(_arch("B", *PRESETS["B"], skip=False))
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
