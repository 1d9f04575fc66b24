r"""NormSoftmax's ViT on CIFAR-10 from scratch (Jiang et al. 2023, sec. 4.1).

32x32 images, patch 4, hidden 256, MLP 1024, 8 heads of 32, depth 8; AdamW
lr 1e-3, wd 0.1, 100 epochs of batch 100, 5 warmup epochs from 2e-4 then
cosine to 0; label smoothing 0.1, random erasing 0.1, mixup 0.2, cutmix 1.0,
TrivialAugment, as the paper's sec. 4.1.

  python -m softattn.main \
      --config=configs/cifar10_vit.py:normalizer=normsoftmax(gamma=sqrt_d) \
      --workdir=/tmp/cifar10_vit_nsm

Args: ``normalizer`` (``softmax``, ``normsoftmax(gamma=sqrt_d)``,
``normsoftmax(gamma=inf)``, ...), ``epochs`` (100), ``depth`` (8),
``wd`` (0.1; the paper's ablation uses 0), ``differential`` (differential
attention, off), ``output_gate`` (``headwise`` or ``elementwise``; empty:
none), ``registers`` (register tokens, 0; Darcet et al. use 4: the sequence
grows from 1 + 64 to 1 + 64 + R tokens), ``runlocal``.
Needs CIFAR-10 in TFDS (``data_dir``), which cannot be downloaded offline.
"""

from ml_collections import config_dict

from softattn import config_files, config_schema


def get_config(arg=None):
  a = config_files.parse_arg(arg, normalizer="softmax", epochs=100, depth=8,
                          wd=0.1, differential=False, output_gate="",
                          registers=0, runlocal=False)
  c = config_schema.default_config()
  c.num_epochs = a.epochs
  c.total_steps = None  # from num_epochs: 500 steps/epoch
  c.batch_size = 100
  c.data.name = "cifar10"
  c.data.data_dir = config_dict.placeholder(str)  # None: TFDS default
  c.data.train_split = "train"
  c.data.eval_split = "test"
  c.data.pp_train = ("flip_lr|pad_and_crop(4)|trivial_augment|"
                     "value_range(-1, 1)|random_erasing(0.1)")
  c.data.pp_eval = "value_range(-1, 1)"
  c.data.shuffle_buffer = 50_000
  c.data.cache = True

  c.model_name = "vit"
  c.model.patch_size = (4, 4)
  c.model.width = 256
  c.model.depth = a.depth
  c.model.mlp_dim = 1024
  c.model.num_heads = 8
  c.model.pool = "tok"
  c.model.normalizer = a.normalizer
  c.model.differential = a.differential
  c.model.output_gate = a.output_gate or None
  c.model.num_registers = a.registers

  c.optimizer.name = "adamw"
  c.optimizer.weight_decay = a.wd
  c.schedule.name = "warmup_cosine"
  c.schedule.base_lr = 1e-3
  c.schedule.init_lr = 2e-4
  c.schedule.warmup_epochs = 5
  c.schedule.end_lr = 0.0
  c.loss.name = "softmax_xent"
  c.loss.label_smoothing = 0.1
  c.loss.mixup_alpha = 0.2
  c.loss.cutmix_alpha = 1.0

  c.log_every = 100
  c.eval_every = 2500
  c.checkpoint_every = 2500
  c.eval.batch_size = 500

  if a.runlocal:
    config_files.shrink_for_runlocal(c, steps=2, batch=8)
    c.model.width = 16
    c.model.depth = 1
    c.model.mlp_dim = 32
    c.model.num_heads = 2
  return c
