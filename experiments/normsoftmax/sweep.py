r"""NormSoftmax study: acceleration, robustness, variants, loss.

Paper: Jiang et al. 2023, "NormSoftmax: Normalize the Input of Softmax to
Accelerate and Stabilize Training". Setup, budgets and costs: RESULTS.md.

Parts (``part=``; the loss parts train a ResNet, not the ViT):

* ``attention`` (default): ``MAIN`` (softmax, NSM gamma sqrt(d) and inf)
  at several budgets (Fig. 3a), softmax and NSM-inf without weight decay
  (Fig. 3b), Table 1's ``VARIANTS`` at the longest budget; every run logs
  per-layer score std and attention entropy (Figs. 2a, 4).
* ``loss``: the NSM cross-entropy, gamma 1 and inf; ``loss_softmax`` and
  ``loss_logitnorm`` (Table 4's LogitNorm loss, tau untuned): separate
  parts because these losses take no ``gamma`` and a sweep cannot unset a
  field.

``scale=full``: ``configs/cifar10_vit.py`` and ``configs/imagenet_resnet50.py``.

  python -m softattn.sweep run experiments/normsoftmax/sweep.py:part=<part> --workdir=workdirs/normsoftmax/<part>
  python experiments/normsoftmax/report.py --workdir=workdirs/normsoftmax

Args: ``part``, ``scale``, ``seeds``, ``variant_seeds``; ``subset``:
``all``; ``focus`` (reduced scale), one budget of ``steps``: ``MAIN`` for
part=attention, the NSM loss at one ``gamma`` (default inf) for part=loss,
their own loss for the other loss parts; or, part=attention only,
``no_warmup`` / ``sgdm`` (``ABLATIONS``). The focus parts: ``report.py``.
"""

from softattn import config_files
from softattn.sweep import declaration, grid

SM, NSM_SQRT, NSM_INF = ("softmax", "normsoftmax(gamma=sqrt_d)",
                         "normsoftmax(gamma=inf)")
MAIN = [SM, NSM_SQRT, NSM_INF]
VARIANTS = ["normsoftmax_learnable", "normsoftmax_inverse(gamma=sqrt_d)",
            "normsoftmax(gamma=1)", "normsoftmax(gamma=0.5*sqrt_d)",
            "normsoftmax(gamma=2*sqrt_d)", "logitnorm"]
# Each loss part's loss (Table 4's rows; the NSM loss's gamma is swept).
LOSSES = {"loss": {"name": "normsoftmax_xent", "gamma": float("inf")},
          "loss_softmax": {"name": "softmax_xent"},
          "loss_logitnorm": {"name": "normalized_xent",
                             "normalizer": "logitnorm"}}
PARTS = ("attention", *LOSSES)
# Fig. 3b's optimization ablations beside weight decay (softmax and NSM-inf
# at the main sweep's longest budget): no learning-rate warmup, or SGD with
# momentum 0.9 in place of AdamW. The paper names no SGDM learning rate, so
# only the optimizer changes (lr, schedule, warmup, clipping as AdamW's; the
# coupled decay 0.1 shrinks the weights by lr * 0.1 per step, as AdamW's
# decoupled one).
ABLATIONS = {"no_warmup": {"schedule.warmup_steps": 0},
             "sgdm": {"optimizer.name": "sgd", "optimizer.momentum": 0.9}}


def _arg(arg):
  a = config_files.parse_arg(arg, part="attention", scale="reduced", seeds=0,
                          variant_seeds=0, subset="all", steps=1200,
                          gamma=float("inf"))
  declaration.check_choices(a, subset=("all", "focus", *ABLATIONS),
                            part=PARTS, scale=declaration.SCALES)
  if a.subset in ABLATIONS and a.part != "attention":
    raise ValueError(f"subset={a.subset} ablates the ViT's recipe; use "
                     "part=attention")
  if a.subset == "focus" and a.scale == "full":
    raise ValueError("subset=focus runs one reduced-scale budget of steps=; "
                     "use scale=reduced")
  if a.gamma != float("inf") and (a.part, a.subset) != ("loss", "focus"):
    raise ValueError(f"gamma={a.gamma:g} picks the NSM loss's gamma of "
                     "part=loss,subset=focus; the other parts sweep theirs")
  if not a.gamma > 0:
    raise ValueError(f"gamma={a.gamma:g}; use a positive gamma, e.g. gamma=1")
  full = a.scale == "full"
  a.seeds = a.seeds or (1 if full else 3)
  a.variant_seeds = a.variant_seeds or (a.seeds if full else 2)
  return a


def get_config(arg=None):
  a = _arg(arg)
  full = a.scale == "full"
  if a.part == "attention":
    if full:
      c = declaration.config_from_file("../../configs/cifar10_vit.py",
                                       relative_to=__file__)
    else:
      c = declaration.config_from_file("../../configs/quickstart.py",
                                       "steps=200,batch=128,width=64,depth=4",
                                       relative_to=__file__)
      c.optimizer.weight_decay = 0.1
      c.schedule.base_lr = 1e-3
      c.loss.label_smoothing = 0.1
      c.checkpoint_every = 200
      c.keep_checkpoints = 1
    c.diagnostics = True    # score std / entropy per layer: Figs. 2a and 4
    return c
  if full:
    c = declaration.config_from_file("../../configs/imagenet_resnet50.py",
                                     "loss=softmax_xent,gamma=inf",
                                     relative_to=__file__)
  else:
    c = declaration.image_config(
        "fashion_mnist", "resize(16)|flip_lr|value_range(-1, 1)",
        "resize(16)|value_range(-1, 1)", shuffle_buffer=10_000,
        total_steps=150, batch_size=64, model_name="preresnet", log_every=10,
        eval_every=50, checkpoint_every=150, keep_checkpoints=1,
        diagnostics=False)
    c.model.depth = 20
    c.optimizer.update(name="sgd", momentum=0.9, nesterov=False,
                       weight_decay=1e-4)
    c.schedule.update(name="warmup_cosine", base_lr=0.1, warmup_steps=10)
    c.eval.batch_size = 1000
  if a.part != "loss" and "gamma" in c.loss:
    del c.loss["gamma"]    # these losses take no gamma
  c.loss.update(LOSSES[a.part])
  return c


def _focus_length(steps, warmup_div):
  """A focus part's one budget: warmup (1/``warmup_div`` of it) and eval
  cadence follow it."""
  return [{"total_steps": steps,
           "schedule.warmup_steps": max(steps // warmup_div, 1),
           "eval_every": steps // 4}]


def get_sweep(arg=None):
  a = _arg(arg)
  vit = a.part == "attention"
  # The acceleration sweep's lengths (full, ViT: *inferred*, Fig. 3a's
  # x-axis values are not in the text).
  field, budgets = (("num_epochs", [10, 25, 50, 100] if vit else
                     [20, 45, 90, 180]) if a.scale == "full" else
                    ("total_steps", [50, 100, 200] if vit else [150]))
  seeds = grid.sweep("seed", list(range(a.seeds)))
  norms = lambda names: grid.sweep("model.normalizer", names)
  if not vit:
    # One budget (reduced): left to the base config, so --set can shorten it.
    lengths = grid.sweep(field, budgets) if len(budgets) > 1 else [{}]
    gammas = [1.0, float("inf")]
    if a.subset == "focus":
      lengths, gammas = _focus_length(a.steps, 15), [a.gamma]
    losses = (grid.sweep("loss.gamma", gammas) if a.part == "loss"
              else [{}])
    return grid.product(losses, lengths, seeds)
  if a.subset == "focus":
    return grid.product(norms(MAIN), _focus_length(a.steps, 10), seeds)
  longest = grid.fixed(field, budgets[-1])
  # softmax and NSM-inf at the longest budget with one recipe change: no
  # weight decay (main sweep), or an ablation subset.
  changed = lambda change: grid.product(norms([SM, NSM_INF]), longest,
                                        [change], seeds)
  if a.subset in ABLATIONS:
    return changed(ABLATIONS[a.subset])
  return grid.chain(
      grid.product(norms(MAIN), grid.sweep(field, budgets), seeds),
      changed({"optimizer.weight_decay": 0.0}),
      grid.product(norms(VARIANTS), longest,
                   grid.sweep("seed", list(range(a.variant_seeds)))))
