r"""Scaled non-local study (Cho et al. 2022, "Rethinking Efficacy of Softmax
for Lightweight Non-Local Neural Networks"): Tables 1-3 as one sweep, two
scales.

* ``scale=full`` (for a GPU/TPU user): PreResNet-56 on CIFAR-10 (or
  ``dataset=cifar100``), 3 NL blocks with 4 heads in the second residual
  stage, theta/phi/g/W_z 1x1 convs N(0, 0.01), 2-D sinusoidal position
  encoding, no subsampling; SGD momentum 0.9, wd 1e-4, batch 128, lr 0.1 /10
  at epochs 81 and 122, 164 epochs; pad-4 crop + flip; 10 seeds.
* ``scale=reduced`` (default; this 2-core CPU): PreResNet-20 on Fashion-MNIST
  resized to 16x16 (stage 2 at 8x8 = 64 positions, 32 channels), 3 NL
  blocks with 4 heads (one after each of stage 2's 3 blocks), the same
  recipe compressed to ``steps`` (300) steps of batch 64 (0.32 epoch) with
  the /10 drops at 50% and 75% of the steps (the paper's 81/164, 122/164),
  pad-2 crop + flip, 3 seeds. At 28x28 and batch 128 one step is 27.5
  GFLOP (XLA's count), ~6 hours for the 51 runs on 2 cores; at 16x16 and
  batch 64 it is 3.3-4.0 GFLOP (``flops_per_step`` in ``runs.csv``).

``subset=all`` (part ``main``): heads 0 (no NL block) and 1/2/4/8 for the
NL (``softmax``) and scaled NL (``scaled``) blocks (Table 3), magnitude- /
direction-only (Table 1) and He / sigma 0 init (Table 2) at 4 heads; the
4-head base run (sigma 0.01) serves all three: 17 settings x 3 seeds.
The focus parts (``report.py``; measured cost in ``run.sh``):

* ``subset=init`` (``init_1ep``, at ``steps=940,seeds=4``, ~1 epoch):
  Table 2's NL vs scaled NL x He vs sigma 0.01 at 4 heads;
* ``subset=paper`` (``paper_defaults``): the paper's own setting where
  ``all`` differs (its Table 1-2 base cells equal its 1-head Table 3 cells:
  it runs them at 1 head, scaled NL with He): scaled NL with He at 1 and 2
  heads, Table 1's modes and Table 2's inits at 1 head (9 settings);
* ``subset=unscaled`` (``unscaled``; with ``size=32``, ``unscaled_32px``,
  the paper's 16x16 stage-2 maps): Sec. 3.1's block without softmax and
  without 1/sqrt(HW) (``UNSCALED``), 4 heads, He;
* ``subset=embed`` (``embed_reduction``): Fig. 2's theta/phi/g embedding to
  ``EMBED`` = 8 of stage 2's 32 channels, both blocks, 4 heads.

  python -m softattn.sweep run experiments/nonlocal/sweep.py --workdir=workdirs/nonlocal
  python experiments/nonlocal/report.py --workdir=workdirs/nonlocal
  python -m softattn.sweep launch experiments/nonlocal/sweep.py:scale=full --print ...

Args (``sweep.py:<k>=<v>,...``): ``scale`` (reduced|full), ``dataset``
(full: cifar10|cifar100), ``seeds`` (default 3 reduced / 10 full),
``steps`` (reduced: 300), ``batch`` (reduced: 64), ``size`` (reduced image
side: 16), ``depth`` (reduced 20 / full 56), ``subset`` (above).
"""

from ml_collections import config_dict

from softattn import configlib
from softattn.sweep import grid

BLOCKS = ["softmax", "scaled"]          # NL block, scaled NL block
HEADS = [1, 2, 4, 8]                    # + 0 (no NL block), declared once
MODES = ["magnitude", "direction"]      # + base
INITS = ["he", "zeros"]                 # + normal (sigma 0.01)
# Sec. 3.1's block "without scaling factor": the scores s = q.k / sqrt(c)
# used as weights as they are (no softmax, no 1/sqrt(HW)), the registry's
# relu_seqlen with the identity activation and alpha = 0.
UNSCALED = "relu_seqlen(alpha=0, act=identity)"
# Fig. 2's embedding channel reduction: theta/phi/g to a quarter of stage
# 2's 32 channels (2 per head at 4 heads; ``main``'s blocks use all 32).
EMBED = 8


def _arg(arg):
  a = configlib.parse_arg(arg, scale="reduced", dataset="cifar10", seeds=0,
                          steps=300, batch=64, size=16, depth=0,
                          subset="all")
  if a.subset not in ("all", "init", "paper", "unscaled", "embed"):
    raise ValueError(f"subset={a.subset!r}; use subset=all, subset=init, "
                     "subset=paper, subset=unscaled or subset=embed")
  if a.scale not in ("reduced", "full"):
    raise ValueError(f"scale={a.scale!r}; use scale=reduced or scale=full")
  if not a.seeds:
    a.seeds = 10 if a.scale == "full" else 3
  if not a.depth:
    a.depth = 56 if a.scale == "full" else 20
  return a


def get_config(arg=None):
  a = _arg(arg)
  full = a.scale == "full"
  c = configlib.default_config()
  c.batch_size = 128 if full else a.batch
  c.data.name = a.dataset if full else "fashion_mnist"
  c.data.data_dir = config_dict.placeholder(str)
  c.data.train_split = "train"
  c.data.eval_split = "test"
  resize = "" if full else f"resize({a.size})|"
  crop = 4 if full else 2
  c.data.pp_train = f"{resize}flip_lr|pad_and_crop({crop})|value_range(-1, 1)"
  c.data.pp_eval = f"{resize}value_range(-1, 1)"
  c.data.shuffle_buffer = 50_000 if full else 10_000
  c.data.cache = True

  c.model_name = "preresnet"
  c.model.depth = a.depth
  c.model.nl_blocks = dict(count=3, stage=2, heads=4,
                           normalizer="softmax", init="normal", mode="base",
                           posenc=True)
  if a.subset == "embed":
    # Declared only where it is swept, so the other parts' configs stay as
    # they ran (their blocks embed to all C channels, the block's default).
    c.model.nl_blocks.embed_channels = EMBED

  c.optimizer.name = "sgd"
  c.optimizer.momentum = 0.9
  c.optimizer.nesterov = False
  c.optimizer.weight_decay = 1e-4
  c.schedule.name = "step"
  c.schedule.base_lr = 0.1
  c.schedule.decay_factor = 0.1
  if full:
    c.num_epochs = 164.0
    c.schedule.boundary_epochs = [81, 122]
    c.log_every = 100
    c.eval_every = 3910   # every 10 epochs
    c.checkpoint_every = 3910
  else:
    c.total_steps = a.steps
    c.schedule.boundaries = [a.steps // 2, 3 * a.steps // 4]
    c.log_every = max(a.steps // 20, 1)
    c.eval_every = a.steps
    c.checkpoint_every = a.steps
    c.keep_checkpoints = 1
  c.diagnostics = False  # the report computes its attention statistic itself
  c.eval.batch_size = 1000
  return c


def get_sweep(arg=None):
  a = _arg(arg)
  nl = "model.nl_blocks."
  seed = grid.sweep("seed", list(range(a.seeds)))
  four = grid.fixed(nl + "heads", 4)
  at4 = lambda *f: grid.product(grid.sweep(nl + "normalizer", BLOCKS), four,
                                *f, seed)    # both blocks at 4 heads
  if a.subset == "init":
    return at4(grid.sweep(nl + "init", ["he", "normal"]))
  if a.subset == "unscaled":
    # He: the paper's init for the scaled block this one is the ablation of.
    return grid.product(grid.fixed(nl + "normalizer", UNSCALED), four,
                        grid.fixed(nl + "init", "he"), seed)
  if a.subset == "embed":
    return at4(grid.fixed(nl + "embed_channels", EMBED))
  if a.subset == "paper":
    block = lambda b: grid.fixed(nl + "normalizer", b)
    one = grid.fixed(nl + "heads", 1)
    he = grid.fixed(nl + "init", "he")
    return grid.chain(
        grid.product(block("scaled"), he, grid.sweep(nl + "heads", [1, 2]),
                     seed),
        grid.product(block("softmax"), one, grid.sweep(nl + "mode", MODES),
                     seed),
        grid.product(block("scaled"), one, he, grid.sweep(nl + "mode", MODES),
                     seed),
        grid.product(block("softmax"), one, grid.sweep(nl + "init", INITS),
                     seed),
        grid.product(block("scaled"), one, grid.fixed(nl + "init", "zeros"),
                     seed))
  no_nl = grid.product(grid.fixed(nl + "heads", 0),
                       grid.fixed(nl + "normalizer", "softmax"), seed)
  table3 = grid.product(grid.sweep(nl + "normalizer", BLOCKS),
                        grid.sweep(nl + "heads", HEADS), seed)
  return grid.chain(no_nl, table3, at4(grid.sweep(nl + "mode", MODES)),
                    at4(grid.sweep(nl + "init", INITS)))
