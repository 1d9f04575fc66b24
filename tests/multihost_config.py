"""The multi-host rehearsal's config (tests/test_multihost.py).

``configs/quickstart.py:runlocal`` (ViT width 16, depth 1) with parameters and
optimizer state FSDP-sharded over all 8 devices, so each of two processes
holds and checkpoints its own half; 4 steps of batch 16 on the test's dataset
of numbered images (``--config.data.data_dir`` says where it is).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_runner  # pylint: disable=g-import-not-at-top,wrong-import-position

DATASET = "multihost_ids"


def get_config(arg=None):
  del arg
  c = train_runner.load_config("configs/quickstart.py:runlocal")
  c.data.name = DATASET
  c.sharding_rules = [(".*", "fsdp")]
  c.batch_size = 16
  c.eval.batch_size = 8
  c.total_steps = 4
  c.checkpoint_every = 2
  c.eval_every = 4
  # Synchronous saves: a kill after step 2 then always finds checkpoint 2.
  c.checkpoint_async = False
  c.diagnostics = False  # one compilation fewer; not what is tested here
  c.verbose = False
  return c
