r"""Attention sinks, registers, gates and sequence-length transfer in ViTs.

Papers: Darcet et al. 2023, "Vision Transformers Need Registers" (arXiv
2309.16588); arXiv 2606.08105 ("no-op" and "broadcast" sinks); the
normalizers' own papers for softmax_sink, softpick, relu_seqlen
(Wortsman et al. 2023), sigmoid (Ramapuram et al. 2024) and ssmax.
Claims and budgets: claims.py; setup and costs: RESULTS.md.

The sweep: ``seeds`` seeds x every ``VARIANTS`` entry (part ``main``), or
the gated softmax (``output_gate=headwise``, part ``gate``), trained on
Fashion-MNIST's 28 px (patch 4: 7 x 7 = 49 patch tokens, a class token,
registers). Every run logs the sink diagnostics at its eval
(``config.diagnostics``: ``eval/sink/<layer>/h<j>/<stat>``,
softattn/nn/diagnostics.py). The resolution transfer is not a sweep part:
the export's probe (probes.py, which says why) evaluates each finished run
at ``TRANSFER_SIZES`` (100 and 196 tokens) with
``configs/transfer.py:from=<run>,size=S``.
``scale=full``: the same variants as ViT-S/16 on big_vision's i21k recipe
(``configs/i21k_vit.py``), trained at 224 px (196 tokens) and evaluated
at 100 and 49 tokens.

  python -m softattn.sweep run experiments/sinks/sweep.py --workdir=workdirs/sinks/main
  python -m softattn.sweep run experiments/sinks/sweep.py:output_gate=headwise --workdir=workdirs/sinks/gate
  python experiments/sinks/report.py --workdir=workdirs/sinks

Args: ``scale`` (reduced|full), ``steps`` (reduced: 200), ``seeds`` (3),
``output_gate`` ("" or ``headwise``: the gate part).
"""

from softattn import config_files
from softattn.sweep import declaration, grid

# name -> the model fields that make it (the rest is the base config's:
# softmax, no registers, no output gate). Darcet et al. use 4 registers.
REGISTERS = 4
VARIANTS = {
    "softmax": {"model.normalizer": "softmax"},
    "registers": {"model.normalizer": "softmax",
                  "model.num_registers": REGISTERS},
    "softmax_sink": {"model.normalizer": "softmax_sink"},
    "softpick": {"model.normalizer": "softpick"},
    "relu_seqlen": {"model.normalizer": "relu_seqlen"},
    "sigmoid": {"model.normalizer": "sigmoid"},
    "ssmax": {"model.normalizer": "ssmax"},
}
# The head-wise output gate (Qiu et al. 2025; softmax, no registers) is a
# part of its own, ``output_gate=headwise``: a sweep cannot override a
# field whose default is None, as ``model.output_gate``'s is.
GATE = "headwise"
# Image sides (px) the trained runs are evaluated at (probes.py's transfer
# probe). Reduced: patch 4 on Fashion-MNIST's 28 px (7 x 7 = 49 patch
# tokens), resized to 40 (100 tokens) and 56 (196). Full: patch 16 at 224
# px (196 tokens), resized to 160 (100) and 112 (49).
TRANSFER_SIZES = {"reduced": (40, 56), "full": (160, 112)}
# (width, depth, mlp_dim, heads) of the reduced ViT.
SIZE = (32, 4, 128, 4)


def _arg(arg):
  a = config_files.parse_arg(arg, scale="reduced", steps=200, seeds=3,
                             output_gate="")
  declaration.check_choices(a, scale=declaration.SCALES,
                            output_gate=("", GATE))
  return a


def get_config(arg=None):
  a = _arg(arg)
  if a.scale == "full":
    c = declaration.config_from_file("../../configs/i21k_vit.py",
                                     "variant=S/16,qk_layernorm=False",
                                     relative_to=__file__)
  else:
    w, d, m, h = SIZE
    c = declaration.config_from_file(
        "../../configs/quickstart.py",
        f"steps={a.steps},batch=128,width={w},depth={d}",
        relative_to=__file__)
    c.model.update(mlp_dim=m, num_heads=h)
    # The sink diagnostics are logged at every eval: one, at the end.
    c.update(log_every=50, eval_every=a.steps, checkpoint_every=a.steps,
             keep_checkpoints=1)
  # A class token, as the papers' ViTs (DeiT, DINOv2, CLIP) have: one of
  # the tokens a sink can sit on (``top_key_cls``).
  c.model.pool = "tok"
  c.diagnostics = True
  c.model.num_registers = 0
  c.model.output_gate = a.output_gate or None
  return c


def get_sweep(arg=None):
  a = _arg(arg)
  # Seed first: a partial study has every variant at seed 0 before any at
  # seed 1, and run names read seed-<s>__normalizer-...[__num_registers-4].
  seeds = grid.sweep("seed", list(range(a.seeds)))
  if a.output_gate:   # the gated softmax: the part's base config
    return seeds
  return grid.product(seeds, list(VARIANTS.values()))
