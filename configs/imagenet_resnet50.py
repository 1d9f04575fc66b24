r"""ResNet-50 on ImageNet-1k with NormSoftmax cross-entropy (Jiang et al. 2023, sec. 5).

SGD momentum 0.9, batch 8192, lr 3.2 (0.1 x batch/256), 5 warmup epochs then
cosine, wd 1e-4 (coupled L2), flip-only augmentation, 224 crops; the logits go
through NormSoftmax (``loss=normsoftmax_xent``) with ``gamma`` in {1, inf}, or
plain softmax cross-entropy (``loss=softmax_xent``); epochs in {20, 45, 90, 180}.
At 20 epochs the paper reports R50 69.18 (softmax) vs 71.42 (NSM, gamma=inf).

  python -m softattn.main \
      --config=configs/imagenet_resnet50.py:loss=normsoftmax_xent,gamma=inf,epochs=20 \
      --workdir=gs://.../r50_nsm_20ep --config.data.data_dir=<your TFDS dir>

Args: ``loss``, ``gamma`` (``inf`` or a number), ``epochs``, ``depth`` (50,
101, 152), ``batch``, ``runlocal``. Needs ``imagenet2012`` prepared in TFDS
(manual download; see docs/data.md).
"""

from ml_collections import config_dict

from softattn import config_files, config_schema


def get_config(arg=None):
  a = config_files.parse_arg(arg, loss="normsoftmax_xent", gamma="inf", epochs=20,
                          depth=50, batch=8192, runlocal=False)
  c = config_schema.default_config()
  c.num_epochs = a.epochs
  c.total_steps = None
  c.batch_size = a.batch
  c.data.name = "imagenet2012"
  c.data.data_dir = config_dict.placeholder(str)  # None: TFDS default
  c.data.train_split = "train"
  c.data.eval_split = "validation"
  c.data.pp_train = "inception_crop(224)|flip_lr|value_range(-1, 1)"
  c.data.pp_eval = "resize_small(256)|central_crop(224)|value_range(-1, 1)"
  c.data.shuffle_buffer = 250_000
  c.data.cache = False

  c.model_name = "resnet"
  c.model.depth = a.depth

  c.optimizer.name = "sgd"
  c.optimizer.momentum = 0.9
  c.optimizer.nesterov = False
  c.optimizer.weight_decay = 1e-4
  c.optimizer.decay_min_ndim = 2  # no decay on BN scales and biases
  c.schedule.name = "warmup_cosine"
  c.schedule.base_lr = 0.1 * a.batch / 256
  c.schedule.warmup_epochs = 5
  c.loss.name = a.loss
  if a.loss == "normsoftmax_xent":
    c.loss.gamma = float(a.gamma)
  c.mesh.data = -1
  # Shard the big conv/dense kernels over the data axis (ZeRO-3 style).
  c.sharding_rules = [(".*", "fsdp")]

  c.log_every = 100
  c.eval_every = 5000
  c.checkpoint_every = 2000
  # A multiple of every slice's data axis up to 1024 chips (1000 is not: it
  # fails resolve_config on a v5e-256); padding examples count for nothing.
  c.eval.batch_size = 1024
  c.diagnostics = False  # no attention in a ResNet

  if a.runlocal:
    config_files.shrink_for_runlocal(c, steps=2, batch=4)
    c.model.depth = 18  # same code path, a fraction of the compile time
    c.data.pp_train = "resize(32)|flip_lr|value_range(-1, 1)"
    c.data.pp_eval = "resize(32)|value_range(-1, 1)"
  return c
