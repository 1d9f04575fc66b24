r"""Reduced-scale scaling demo: ViTs from mu-size up, three normalizers, Fashion-MNIST.

The CPU-sized analogue of the ReLU-attention paper's scaling plot (Wortsman et
al. 2023, "Replacing softmax with ReLU in Vision Transformers", arXiv
2309.08586, Fig. 1): error
against training compute, one curve per normalizer, for

* ``softmax``;
* ``relu_seqlen``: ``relu(s) / n`` (alpha = 1, the paper's best);
* ``normsoftmax``: NormSoftmax with gamma = inf (Jiang et al. 2023), which
  drops the 1/sqrt(d) scale by itself.

Five ViT sizes on 28x28 images with 4x4 patches (49 tokens), from half of
big_vision's ``mu`` (width 16) through ``mu`` (width 32, depth 1, MLP 128, 2
heads) to width 128, depth 4 (a step towards ``Ti``, width 192, depth 12,
whose runs alone would take hours on 2 CPU cores). Five sizes give each
normalizer's three-parameter fit two degrees of freedom. Every run trains ``steps`` steps of batch ``batch`` (400 x 128 ~ 0.85
epoch) with the quickstart's recipe (AdamW 2e-3, wd 0.05, warmup + cosine,
grad clip 1, sin-cos position embedding, mean pooling); attention diagnostics
are off because they cost an extra forward/backward at every log step and
the scaling plot does not use them.

  python -m softattn.data prepare fashion_mnist
  python -m softattn.sweep run configs/sweeps/scaling_fmnist.py \
      --workdir=workdirs/scaling_fmnist
  python -m softattn.sweep report workdirs/scaling_fmnist \
      --out=experiments/scaling/results

(``experiments/scaling/run.sh`` runs exactly this.) 15 runs, 6.2e13 training
FLOPs in all (XLA's count: 3.2e10 per step for the largest size): 21 minutes
on 2 CPU cores with ``--parallel=2`` (measured; the largest size ~6 minutes
per run), results in ``experiments/scaling/RESULTS.md``.

Args (``configs/sweeps/scaling_fmnist.py:<k>=<v>,...``):
  steps: training steps per run (default 400).
  batch: global batch size (default 128).
  seeds: seeds per (size, normalizer) (default 1).
"""

from softattn import config_files
from softattn.sweep import declaration, grid

# (width, depth, mlp_dim, heads): half of mu, mu, then ~x3-8 compute per step.
SIZES = [(16, 1, 64, 2), (32, 1, 128, 2), (64, 2, 256, 2), (96, 3, 384, 3),
         (128, 4, 512, 4)]
NORMALIZERS = ["softmax", "relu_seqlen", "normsoftmax"]


def _arg(arg):
  return config_files.parse_arg(arg, steps=400, batch=128, seeds=1)


def get_config(arg=None):
  a = _arg(arg)
  c = declaration.config_from_file(
      "../quickstart.py", f"steps={a.steps},batch={a.batch}",
      relative_to=__file__)
  c.diagnostics = False
  c.log_every = 50
  c.eval_every = a.steps  # evaluate once, at the end: the plotted number
  c.checkpoint_every = 100
  c.keep_checkpoints = 1
  return c


def get_sweep(arg=None):
  a = _arg(arg)
  sizes = grid.zip_(
      grid.sweep("model.width", [s[0] for s in SIZES]),
      grid.sweep("model.depth", [s[1] for s in SIZES]),
      grid.sweep("model.mlp_dim", [s[2] for s in SIZES]),
      grid.sweep("model.num_heads", [s[3] for s in SIZES]),
  )
  return grid.product(sizes, grid.sweep("model.normalizer", NORMALIZERS),
                      grid.sweep("seed", list(range(a.seeds))))
