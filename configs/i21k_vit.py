r"""BigVision ViT pre-training on ImageNet-21k, for ReLU attention (Wortsman et al. 2023).

big_vision's i21k recipe with its hyperparameters unchanged: 30 epochs, batch
4096, Adam (b2 0.999, bf16 first moment), lr 1e-3, 10k warmup steps then
cosine, gradient clipping 1.0, decoupled weight decay 1e-4, sigmoid
cross-entropy with the head bias at -10, inception crop 224 + flip, qk
LayerNorm on. Attention ``phi = n^-alpha h(s)``: ``normalizer=relu_seqlen``
(``relu_seqlen(alpha=0.5, act=gelu)``, ...) or ``softmax``. The i1k accuracy
of the 21k model (top class among the i1k classes) is evaluated on
``imagenet2012`` validation when ``config.eval.i21k_wnids_file`` points at the
wnid list your i21k labels follow.

  python -m softattn.main \
      --config=configs/i21k_vit.py:variant=S/16,normalizer=relu_seqlen \
      --workdir=<dir> --config.data.data_dir=<TFDS dir with imagenet21k>

Weight decay: big_vision's ``wd=1e-4`` is "decoupled": ``p -= sched(t) * 1e-4
* p``, not multiplied by the lr. optax's ``adamw`` multiplies by the lr, so
``weight_decay = 1e-4 / base_lr = 0.1`` here gives the same update.

Args: ``variant`` (S/32, S/16, S/8, Ti/16, B/16, ...), ``normalizer``,
``epochs`` (30), ``qk_layernorm`` (True), ``registers`` (0; register
tokens, Darcet et al. use 4: L = 196 + R at 224 px for /16), ``batch``
(4096), ``remat``
(False; per-block rematerialisation, for L/16 on small slices),
``dtype`` (float32: big_vision's recipe; bfloat16: activations and matmuls
in bf16 while parameters, Adam's second moment and the loss stay float32,
see below), ``runlocal`` (tiny ViT, imagenet2012 mock-able data instead of
imagenet21k, which `python -m softattn.data prepare imagenet21k` prepares).

``dtype=bfloat16``: the forward and backward run on bf16 copies of the
float32 parameters (``compute_dtype``), so every activation the backward
keeps is half the size and the weight all-gathers move half the bytes; the
logits are cast to float32 before the loss, the gradients arrive in float32
(the cast's transpose), and the update is applied to the float32 master
weights. Attention scores are normalised in float32 (every normalizer
upcasts low-precision input). What it changes in training: matmul inputs
and activations carry 8 mantissa bits, so it is not bitwise the float32 run
and small loss differences are expected; big_vision trains its ViTs this
way on TPU. The launch table (docs/scale.md) has both.
"""

from ml_collections import config_dict

from softattn import config_files, config_schema


def get_config(arg=None):
  a = config_files.parse_arg(arg, variant="S/16", normalizer="relu_seqlen",
                          epochs=30, qk_layernorm=True, batch=4096,
                          remat=False, dtype="float32", registers=0,
                          runlocal=False)
  c = config_schema.default_config()
  c.num_epochs = a.epochs
  c.total_steps = None
  c.batch_size = a.batch
  c.data.name = "imagenet21k"
  c.data.data_dir = config_dict.placeholder(str)  # None: TFDS default
  c.data.train_split = "full[51200:]"
  c.data.eval_split = "full[:51200]"  # big_vision's held-out i21k split
  c.data.pp_train = "inception_crop(224)|flip_lr|value_range(-1, 1)"
  c.data.pp_eval = "resize_small(256)|central_crop(224)|value_range(-1, 1)"
  c.data.shuffle_buffer = 250_000
  c.data.cache = False

  c.model_name = "vit"
  c.model.variant = a.variant
  c.model.pool = "gap"
  c.model.rep_size = 0
  c.model.head_bias_init = -10.0
  c.model.normalizer = a.normalizer
  c.model.qk_layernorm = a.qk_layernorm
  # Attention logits soft-cap c*tanh(s/c) on the scaled scores (None: off;
  # Gemma 2 caps at 50): --config.model.logits_soft_cap=50.
  c.model.logits_soft_cap = config_dict.placeholder(float)
  c.model.num_registers = a.registers
  # remat: keep only each block's input for the backward (recomputing the
  # rest, ~1/3 more FLOPs). L/16 at 256 images per chip (v4-32) needs it to
  # fit in HBM: docs/scale.md. Unrolled, not scanned, so that XLA's cost
  # analysis counts every layer.
  c.model.remat = a.remat
  c.compute_dtype = a.dtype

  c.optimizer.name = "adamw"
  c.optimizer.b1 = 0.9
  c.optimizer.b2 = 0.999
  c.optimizer.mu_dtype = "bfloat16"
  c.optimizer.weight_decay = 1e-4 / 1e-3  # decoupled 1e-4, see docstring
  c.optimizer.grad_clip_norm = 1.0
  c.schedule.name = "warmup_cosine"
  c.schedule.base_lr = 1e-3
  c.schedule.warmup_steps = 10_000
  c.loss.name = "sigmoid_xent"

  c.mesh.data = -1
  c.sharding_rules = [(".*", "fsdp")]
  c.log_every = 100
  c.eval_every = 10_000
  c.checkpoint_every = 2000
  c.eval.batch_size = 1024
  # i1k accuracy by restricting to the i1k classes: set True; the label order
  # is the shipped big_vision one unless eval.i21k_wnids_file names another.
  c.eval.i1k_from_i21k = False
  c.eval.i1k_data = dict(
      name="imagenet2012", data_dir=None, train_split="train",
      eval_split="validation",
      pp_train="resize_small(256)|central_crop(224)|value_range(-1, 1)",
      pp_eval="resize_small(256)|central_crop(224)|value_range(-1, 1)",
      shuffle_buffer=1, cache=False)

  if a.runlocal:
    config_files.shrink_for_runlocal(c, steps=2, batch=4)
    c.data.name = "imagenet2012"
    c.data.train_split = "train"
    c.data.eval_split = "validation"
    c.data.pp_train = "resize(32)|flip_lr|value_range(-1, 1)"
    c.data.pp_eval = "resize(32)|value_range(-1, 1)"
    c.model.variant = "mu/8"
  return c
