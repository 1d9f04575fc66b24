r"""Scaled non-local study: Tables 1-3 as one sweep, two scales.

Paper: Cho et al. 2022, "Rethinking Efficacy of Softmax for Lightweight
Non-Local Neural Networks". Setup, budgets and costs: RESULTS.md.

The sweep (``subset=all``, part ``main``): heads 0 (no NL block) and
``HEADS`` for the NL and scaled NL blocks (Table 3), ``MODES`` (Table 1)
and ``INITS`` (Table 2) at 4 heads. The focus subsets (parts in
``report.py``): ``init`` (Table 2 at ~1 epoch), ``paper`` (the paper's own
setting: 1 head, scaled NL with He), ``unscaled`` (Sec. 3.1's block,
``UNSCALED``), ``embed`` (Fig. 2's ``EMBED`` channels), ``timing``
(Table 3's step times: NL and scaled NL at ``TIMED_HEADS``, alternating;
run it alone, ``--parallel=1``). ``scale=full``:
PreResNet-56 on CIFAR, the paper's recipe, 10 seeds.

  python -m softattn.sweep run experiments/nonlocal/sweep.py --workdir=workdirs/nonlocal
  python experiments/nonlocal/report.py --workdir=workdirs/nonlocal
  python -m softattn.sweep launch experiments/nonlocal/sweep.py:scale=full --print ...

Args: ``scale`` (reduced|full), ``dataset`` (full: cifar10|cifar100),
``seeds`` (3 reduced / 10 full), ``steps`` (reduced: 300), ``batch``
(reduced: 64), ``size`` (reduced image side: 16), ``depth`` (20 reduced /
56 full), ``subset`` (above).
"""

from softattn import config_files
from softattn.sweep import declaration, grid

BLOCKS = ["softmax", "scaled"]          # NL block, scaled NL block
HEADS = [1, 2, 4, 8]                    # + 0 (no NL block), declared once
MODES = ["magnitude", "direction"]      # + base
INITS = ["he", "zeros"]                 # + normal (sigma 0.01)
# Sec. 3.1's block "without scaling factor": the scores s = q.k / sqrt(c)
# used as weights as they are (no softmax, no 1/sqrt(HW)), the registry's
# relu_seqlen with the identity activation and alpha = 0.
UNSCALED = "relu_seqlen(alpha=0, act=identity)"
# The head counts whose step times Table 3's claims compare.
TIMED_HEADS = [1, 2, 4]
# Fig. 2's embedding channel reduction: theta/phi/g to a quarter of stage
# 2's 32 channels (2 per head at 4 heads; ``main``'s blocks use all 32).
EMBED = 8


def _arg(arg):
  # Reduced: 16x16 inputs (stage 2 at 8x8 = 64 positions); at 28x28 and
  # batch 128 a step is 27.5 GFLOP, ~6 hours for `main` on 2 cores.
  a = config_files.parse_arg(arg, scale="reduced", dataset="cifar10", seeds=0,
                          steps=300, batch=64, size=16, depth=0,
                          subset="all")
  declaration.check_choices(
      a, subset=("all", "init", "paper", "unscaled", "embed", "timing"),
      scale=declaration.SCALES)
  full = a.scale == "full"
  a.seeds = a.seeds or (10 if full else 3)
  a.depth = a.depth or (56 if full else 20)
  return a


def get_config(arg=None):
  a = _arg(arg)
  full = a.scale == "full"
  resize = "" if full else f"resize({a.size})|"
  crop = 4 if full else 2
  c = declaration.image_config(
      a.dataset if full else "fashion_mnist",
      f"{resize}flip_lr|pad_and_crop({crop})|value_range(-1, 1)",
      f"{resize}value_range(-1, 1)", shuffle_buffer=50_000 if full else 10_000,
      batch_size=128 if full else a.batch)

  c.model_name = "preresnet"
  c.model.depth = a.depth
  c.model.nl_blocks = dict(count=3, stage=2, heads=4,
                           normalizer="softmax", init="normal", mode="base",
                           posenc=True)
  if a.subset == "embed":
    # Declared only where it is swept, so the other parts' configs stay as
    # they ran (their blocks embed to all C channels, the block's default).
    c.model.nl_blocks.embed_channels = EMBED

  c.optimizer.update(name="sgd", momentum=0.9, nesterov=False,
                     weight_decay=1e-4)
  c.schedule.update(name="step", base_lr=0.1, decay_factor=0.1)
  if full:
    c.num_epochs = 164.0
    c.schedule.boundary_epochs = [81, 122]
    c.log_every = 100
    c.eval_every = c.checkpoint_every = 3910   # every 10 epochs
  else:
    c.total_steps = a.steps
    # The paper's drops (epochs 81 and 122 of 164) at half and 3/4 of steps.
    c.schedule.boundaries = [a.steps // 2, 3 * a.steps // 4]
    c.log_every = max(a.steps // 20, 1)
    c.eval_every = c.checkpoint_every = a.steps
    c.keep_checkpoints = 1
  if a.subset == "timing":
    # Its runs are read for step time only: a test-set slice keeps the
    # final evaluation from outlasting the timed steps.
    c.data.eval_split = "test[:1000]"
  c.diagnostics = False  # the report computes its attention statistic itself
  c.eval.batch_size = 1000
  return c


def get_sweep(arg=None):
  a = _arg(arg)
  def nl(seeds=range(a.seeds), **fields):
    """The NL blocks' ``fields`` (a list: swept; else fixed), x ``seeds``."""
    return grid.product(*[
        (grid.sweep if isinstance(v, list) else grid.fixed)(
            "model.nl_blocks." + k, v) for k, v in fields.items()],
                        grid.sweep("seed", list(seeds)))

  if a.subset == "init":
    return nl(normalizer=BLOCKS, heads=4, init=["he", "normal"])
  if a.subset == "unscaled":
    # He: the paper's init for the scaled block this one is the ablation of.
    return nl(normalizer=UNSCALED, heads=4, init="he")
  if a.subset == "timing":
    # Run order is the measurement here: NL and scaled NL alternate within
    # each head count and seed, so a drift in the machine's load falls on
    # both alike. Each run's keys keep main's order (normalizer, heads,
    # seed), and so its run names.
    return grid.chain(*(nl([s], normalizer=b, heads=h)
                        for s in range(a.seeds) for h in TIMED_HEADS
                        for b in BLOCKS))
  if a.subset == "embed":
    return nl(normalizer=BLOCKS, heads=4, embed_channels=EMBED)
  if a.subset == "paper":
    return grid.chain(
        nl(normalizer="scaled", init="he", heads=[1, 2]),
        nl(normalizer="softmax", heads=1, mode=MODES),
        nl(normalizer="scaled", heads=1, init="he", mode=MODES),
        nl(normalizer="softmax", heads=1, init=INITS),
        nl(normalizer="scaled", heads=1, init="zeros"))
  # No NL block; Table 3's heads; Tables 1 and 2 at 4 heads.
  return grid.chain(nl(heads=0, normalizer="softmax"),
                    nl(normalizer=BLOCKS, heads=HEADS),
                    nl(normalizer=BLOCKS, heads=4, mode=MODES),
                    nl(normalizer=BLOCKS, heads=4, init=INITS))
