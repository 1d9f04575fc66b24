r"""Quickstart: a small ViT on Fashion-MNIST, softmax vs NormSoftmax, on a CPU.

  python -m softattn.data prepare fashion_mnist          # once, offline OK
  python -m softattn.main --config=configs/quickstart.py:normalizer=softmax \
      --workdir=/tmp/quickstart/softmax

``python -m softattn.quickstart`` runs both normalizers and plots them.

Args (``configs/quickstart.py:<k>=<v>,...``):
  normalizer: attention normalizer spec (``softmax``, ``normsoftmax(gamma=inf)``,
    ``relu_seqlen``, ...). The NormSoftmax family drops the 1/sqrt(d) scale
    by itself (``Normalizer.default_scale``).
  steps: training steps (default 300, ~0.6 epochs: 2-4 minutes per
    normalizer on 2 CPU cores; accuracy keeps rising with more).
  batch: global batch size.
  width, depth: the ViT's size (patch 4 -> 7x7 = 49 tokens).
  runlocal: a 3-step smoke run with tiny shapes (what the tests run).
"""

from ml_collections import config_dict

from softattn import config_files, config_schema


def get_config(arg=None):
  a = config_files.parse_arg(arg, normalizer="softmax", steps=300, batch=128,
                          width=64, depth=4, runlocal=False)
  c = config_schema.default_config()
  c.seed = 0
  c.total_steps = a.steps
  c.batch_size = a.batch
  c.data.name = "fashion_mnist"
  c.data.data_dir = config_dict.placeholder(str)  # None: TFDS default
  c.data.train_split = "train"
  c.data.eval_split = "test"
  c.data.pp_train = "value_range(-1, 1)"
  c.data.pp_eval = "value_range(-1, 1)"
  c.data.shuffle_buffer = 10_000
  c.data.cache = True

  c.model_name = "vit"
  c.model.patch_size = (4, 4)
  c.model.width = a.width
  c.model.depth = a.depth
  c.model.mlp_dim = 2 * a.width
  c.model.num_heads = 4
  c.model.pool = "gap"
  c.model.posemb = "sincos2d"
  c.model.normalizer = a.normalizer

  c.optimizer.name = "adamw"
  c.optimizer.weight_decay = 0.05
  c.optimizer.grad_clip_norm = 1.0
  c.schedule.name = "warmup_cosine"
  c.schedule.base_lr = 2e-3
  c.schedule.warmup_steps = max(a.steps // 10, 1)
  c.loss.name = "softmax_xent"
  c.loss.label_smoothing = 0.0

  c.log_every = 10
  c.eval_every = max(a.steps // 4, 1)  # a few points for the accuracy curve
  c.checkpoint_every = max(a.steps // 4, 1)
  c.keep_checkpoints = 2
  c.eval.batch_size = 1000

  if a.runlocal:
    config_files.shrink_for_runlocal(c, steps=3, batch=8)
    c.model.width = 16
    c.model.depth = 1
    c.model.mlp_dim = 32
    c.model.num_heads = 2
  return c
