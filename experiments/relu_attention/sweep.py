r"""ReLU-attention study (Wortsman et al. 2023): phi = n^-alpha h(s) vs softmax.

Paper: Wortsman et al. 2023, "Replacing softmax with ReLU in Vision
Transformers", arXiv 2309.08586.
Setup as below. Runs (all with qk-LayerNorm unless said):

* Fig. 2: alpha in {0, 0.25, 0.5, 0.75, 1} x h in {relu, relu2, gelu,
  softplus, identity, sigmoid, relu6} (``relu_seqlen(alpha=a, act=h)``,
  the caption's set) and ``softmax``, at two model sizes, seed 0;
* extra seeds 1, 2 for softmax and for relu and identity at alpha 0, 0.5
  and 1 (``SEEDED``) at both sizes, so that the main comparisons -- alpha,
  "removing the activation hurts", relu/n vs softmax -- have 3 seeds; and
  for the other activations at alpha 1 (``AT_ALPHA_1``), so that Fig. 2's
  "no clear best non-linearity at alpha ~ 1" has 3 seeds too;
* Fig. 3: without qk-LayerNorm, softmax, relu/n and relu2/n, small size,
  3 seeds;
* Fig. 4: with the gated attention unit, relu and relu2 (the figure's two)
  at alpha 0 and 1, small size, 3 seeds;
* every run logs XLA's FLOPs per train step and its CPU core-seconds
  (``status.json``) for the accuracy-vs-compute plot, and a 10-shot linear
  probe on frozen pre-logits at the end (``config.fewshot``).

Scales:

* ``scale=full``: big_vision's i21k ViT recipe (``configs/i21k_vit.py``:
  30 epochs, batch 4096, Adam with bf16 first moment, lr 1e-3, wd 1e-4,
  10k warmup, cosine, clip 1, sigmoid xent, head bias -10, qk-LN on) for
  S/32 and S/16, h in the paper's set, 1 seed. i1k accuracy of i21k models
  and the 8-dataset 10-shot probe need those datasets prepared (see
  docs/data.md) and are configured in ``configs/i21k_vit.py``.
* ``scale=reduced`` (default; this CPU): Fashion-MNIST, ViT patch 4 (49
  tokens), sizes width 32 depth 2 (2 heads) and width 64 depth 2 (4 heads),
  200 steps of batch 128 with the quickstart's AdamW recipe; 10-shot probe
  on Fashion-MNIST itself (2,000 train / 2,000 test images, 3 draws): 141
  runs with the extra seeds (XLA: 1.28 GFLOP per step for the small size).
  Measured costs of every part, by session: experiments/README.md.

  python -m softattn.sweep run experiments/relu_attention/sweep.py --workdir=workdirs/relu_attention
  python experiments/relu_attention/report.py --workdir=workdirs/relu_attention

Args: ``scale``, ``steps`` (reduced, 200), ``seeds`` (extra-seed runs, 3),
``subset``: ``all``; ``focus``, the ``SEEDED`` normalizers on the medium
model only (``report.py``'s ``medium_1000`` part: ``steps=1000``, 5x the
budget); or ``speed``, relu/n and relu6/n at alpha 1 on both sizes, so
that their core-seconds come from one session (``speed_relu6``: relu6/n's
``main`` runs were made in a later session than relu/n's).
"""

from softattn import configlib
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
# The other activations at alpha 1, 3 seeds at every size (main part only):
# Fig. 2 compares the non-linearities there.
AT_ALPHA_1 = [relu_n(1.0, h) for h in ACTS if h not in ("relu", "identity")]


def _arg(arg):
  a = configlib.parse_arg(arg, scale="reduced", steps=200, seeds=3,
                          subset="all")
  if a.subset not in ("all", "focus", "speed"):
    raise ValueError(f"subset={a.subset!r}; use subset=all, subset=focus or "
                     "subset=speed")
  if a.scale not in ("reduced", "full"):
    raise ValueError(f"scale={a.scale!r}; use scale=reduced or scale=full")
  return a


def get_config(arg=None):
  a = _arg(arg)
  if a.scale == "full":
    c = declaration.config_from_file("../../configs/i21k_vit.py",
                                     "variant=S/32", relative_to=__file__)
    c.model.qk_layernorm = True
    c.model.gated = False
    return c
  w, d, m, h = SIZES["small"]
  c = declaration.config_from_file(
      "../../configs/quickstart.py",
      f"steps={a.steps},batch=128,width={w},depth={d}", relative_to=__file__)
  c.model.mlp_dim = m
  c.model.num_heads = h
  c.model.qk_layernorm = True
  c.model.gated = False
  c.diagnostics = False
  c.log_every = 20
  c.eval_every = a.steps
  c.checkpoint_every = a.steps
  c.keep_checkpoints = 1
  c.fewshot.datasets = {"fmnist": dict(
      name="fashion_mnist", train_split="train[:2000]",
      eval_split="test[:2000]", pp_eval="value_range(-1, 1)")}
  c.fewshot.shots = [10]
  c.fewshot.seeds = 3
  c.fewshot.every = 0
  return c


def _sizes(a, names=None):
  if a.scale == "full":
    return grid.sweep("model.variant", FULL_VARIANTS)
  names = names or list(SIZES)
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
    return grid.product(_sizes(a), grid.sweep("model.normalizer", [
        relu_n(1.0), relu_n(1.0, "relu6")]), all_seeds)
  norms = ["softmax"] + [relu_n(al, h) for h in ACTS for al in ALPHAS]
  fig2 = grid.product(_sizes(a), grid.sweep("model.normalizer", norms),
                      grid.fixed("seed", 0))
  if a.scale == "full":
    return fig2
  more = grid.sweep("seed", list(range(1, a.seeds)))
  extra = grid.product(_sizes(a), grid.sweep("model.normalizer",
                                             SEEDED + AT_ALPHA_1), more)
  small = _sizes(a, ["small"])
  no_qkln = grid.product(small, grid.sweep("model.normalizer", [
      "softmax", relu_n(1.0), relu_n(1.0, "relu2")]),
                         grid.fixed("model.qk_layernorm", False), all_seeds)
  gated = grid.product(small, grid.sweep("model.normalizer", [
      relu_n(al, h) for h in ("relu", "relu2") for al in (0.0, 1.0)]),
                       grid.fixed("model.gated", True), all_seeds)
  return grid.chain(fig2, extra, no_qkln, gated)
