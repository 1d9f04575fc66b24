r"""ReLU-attention study: phi = n^-alpha h(s) in place of softmax.

Paper: Wortsman et al. 2023, "Replacing softmax with ReLU in Vision
Transformers", arXiv 2309.08586. Setup, budgets and costs: RESULTS.md.

The sweep (qk-LayerNorm on unless said): Fig. 2's ``ALPHAS`` x ``ACTS``
grid and softmax at both ``SIZES``, seed 0; seeds 1.. for ``SEEDED``,
``AT_ALPHA_1`` and ``AT_ALPHA_HALF``; Fig. 3 (qk-LayerNorm off) and
Fig. 4 (gated) on the small size. Every run logs FLOPs and core-seconds
and ends with a 10-shot probe (``config.fewshot``). ``scale=full``: the
Fig. 2 grid on big_vision's i21k recipe (``configs/i21k_vit.py``) for
``FULL_VARIANTS``.

  python -m softattn.sweep run experiments/relu_attention/sweep.py --workdir=workdirs/relu_attention
  python experiments/relu_attention/report.py --workdir=workdirs/relu_attention

Args: ``scale`` (reduced|full), ``steps`` (reduced: 200), ``seeds`` (3),
``subset``: ``all``; ``focus``, ``SEEDED`` on the medium size (part
``medium_1000``); ``speed``, relu/n and relu6/n at alpha 1 on both sizes
in one session, alternating within each size and seed (part
``speed_relu6``).
"""

from softattn import config_files
from softattn.sweep import declaration, grid

ALPHAS = [0.0, 0.25, 0.5, 0.75, 1.0]
ACTS = ["relu", "relu2", "gelu", "softplus", "identity", "sigmoid", "relu6"]
# (width, depth, mlp_dim, heads) of the reduced sizes; full: variants.
SIZES = {"small": (32, 2, 128, 2), "medium": (64, 2, 256, 4)}
FULL_VARIANTS = ["S/32", "S/16"]


def relu_n(alpha, act="relu"):
  return f"relu_seqlen(alpha={alpha:g}, act={act})"


# The normalizers with 3 seeds at every size (and in the focus set).
SEEDED = ["softmax"] + [relu_n(al, h) for h in ("relu", "identity")
                        for al in (0.0, 0.5, 1.0)]
OTHER_ACTS = [h for h in ACTS if h not in ("relu", "identity")]
# The other activations at alpha 1, 3 seeds at every size (main part only):
# Fig. 2 compares the non-linearities there; and at alpha 0.5, so that each
# activation's "alpha 1 > alpha 0.5" (Fig. 2's best alpha close to 1) has
# the rule's 3 seed pairs, not the one-seed grid's one.
AT_ALPHA_1 = [relu_n(1.0, h) for h in OTHER_ACTS]
AT_ALPHA_HALF = [relu_n(0.5, h) for h in OTHER_ACTS]


def _arg(arg):
  a = config_files.parse_arg(arg, scale="reduced", steps=200, seeds=3,
                          subset="all")
  declaration.check_choices(a, subset=("all", "focus", "speed"),
                            scale=declaration.SCALES)
  return a


def get_config(arg=None):
  a = _arg(arg)
  if a.scale == "full":
    c = declaration.config_from_file("../../configs/i21k_vit.py",
                                     "variant=S/32", relative_to=__file__)
  else:
    w, d, m, h = SIZES["small"]
    c = declaration.config_from_file(
        "../../configs/quickstart.py",
        f"steps={a.steps},batch=128,width={w},depth={d}",
        relative_to=__file__)
    c.model.update(mlp_dim=m, num_heads=h)
    c.update(diagnostics=False, log_every=20, eval_every=a.steps,
             checkpoint_every=a.steps, keep_checkpoints=1)
    c.fewshot.datasets = {"fmnist": dict(
        name="fashion_mnist", train_split="train[:2000]",
        eval_split="test[:2000]", pp_eval="value_range(-1, 1)")}
    c.fewshot.update(shots=[10], seeds=3, every=0)
  c.model.update(qk_layernorm=True, gated=False)
  return c


def _sizes(a, names=SIZES):
  if a.scale == "full":
    return grid.sweep("model.variant", FULL_VARIANTS)
  return grid.zip_(*[grid.sweep(f"model.{k}", [SIZES[n][i] for n in names])
                     for i, k in enumerate(("width", "depth", "mlp_dim",
                                            "num_heads"))])


def get_sweep(arg=None):
  a = _arg(arg)
  all_seeds = grid.sweep("seed", list(range(a.seeds)))
  if a.subset == "focus":
    return grid.product(_sizes(a, ["medium"]), grid.sweep(
        "model.normalizer", SEEDED), all_seeds)
  if a.subset == "speed":
    # Run order is the measurement here: the two normalizers alternate
    # within each size and seed (relu, relu6, relu, relu6, ...), so a
    # drift in the machine's load over the part falls on both alike. (Size
    # x normalizer x seed order ran every relu run of a size before every
    # relu6 run, and the core-seconds gap followed that order.) Each run's
    # overrides keep the key order of size x normalizer x seed, so the run
    # names, which list keys in declared order, stay as before.
    norms = grid.sweep("model.normalizer", [relu_n(1.0),
                                            relu_n(1.0, "relu6")])
    return grid.chain(*(grid.product([size], norms, [seed])
                        for size in _sizes(a) for seed in all_seeds))
  norms = ["softmax"] + [relu_n(al, h) for h in ACTS for al in ALPHAS]
  fig2 = grid.product(_sizes(a), grid.sweep("model.normalizer", norms),
                      grid.fixed("seed", 0))
  if a.scale == "full":
    return fig2
  extra = grid.product(_sizes(a), grid.sweep(
      "model.normalizer", SEEDED + AT_ALPHA_1 + AT_ALPHA_HALF),
                       grid.sweep("seed", list(range(1, a.seeds))))
  small = _sizes(a, ["small"])
  no_qkln = grid.product(small, grid.sweep("model.normalizer", [
      "softmax", relu_n(1.0), relu_n(1.0, "relu2")]),
                         grid.fixed("model.qk_layernorm", False), all_seeds)
  gated = grid.product(small, grid.sweep("model.normalizer", [
      relu_n(al, h) for h in ("relu", "relu2") for al in (0.0, 1.0)]),
                       grid.fixed("model.gated", True), all_seeds)
  return grid.chain(fig2, extra, no_qkln, gated)
