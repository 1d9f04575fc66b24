r"""Smoke sweep: 2 normalizers x 2 ViT depths x 1 seed, a few steps each.

Checks a sweep end to end in about a minute on a CPU, on TFDS mock data:

  python -m softattn.sweep run configs/sweeps/smoke.py --mock_data \
      --workdir=/tmp/sweep_smoke --parallel=2
  python -m softattn.sweep report /tmp/sweep_smoke

(what ``tests/test_sweep_e2e.py`` runs). The base is the quickstart's
``runlocal`` config; steps and checkpoints are set so a run can be interrupted
between two checkpoints.

Args (``configs/sweeps/smoke.py:<k>=<v>,...``):
  steps: training steps per run (default 6).
"""

from softattn import config_files
from softattn.sweep import declaration, grid


def get_config(arg=None):
  a = config_files.parse_arg(arg, steps=6)
  c = declaration.config_from_file("../quickstart.py", "runlocal=True",
                                   relative_to=__file__)
  c.total_steps = a.steps
  c.eval_every = a.steps
  c.checkpoint_every = 2
  c.log_every = 1
  # Orbax's background save thread races with mock_data's file-system patch.
  c.checkpoint_async = False
  c.verbose = True
  return c


def get_sweep(arg=None):
  del arg
  return grid.product(
      grid.sweep("model.depth", [1, 2]),
      grid.sweep("model.normalizer", ["softmax", "relu_seqlen"]),
      grid.fixed("seed", 0),
  )
