"""Checkpoint probes of the element-wise study (run when exporting runs.csv).

* ``paper_grad_avg``: the paper's "last gradients average" recomputed from a
  run's final checkpoint;
* ``first_steps``: what the first optimizer steps do to a model's ReLUs,
  from its config (why B without skip sits at chance);
* ``first_head_weights``: the statistics the paper prints of a trained
  model's first-head x and y weights;
* ``branch_effect``: the test accuracy a trained model loses when its
  attention branch is removed (every layer's conv kernel zeroed, its bias
  kept): whether the attention carries the accuracy at all.
"""

from __future__ import annotations

import numpy as np

from softattn import studies

# The paper's "most values within [-0.05, 0.05]" (Sec. 3, model G).
WEIGHT_BAND = 0.05


def _model_and_loss(config, y):
  """``(model, mean_loss(logits))`` of a run's config against labels ``y``
  (the config's loss and label smoothing, as in training)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from softattn import losses  # pylint: disable=g-import-not-at-top
  model = studies.build_model(config)   # classes from the dataset's facts
  onehot = jax.nn.one_hot(y, model.num_classes)
  if config.loss.get("label_smoothing"):
    onehot = losses.smooth_labels(onehot, config.loss.label_smoothing)
  loss_fn = losses.from_config(config.loss)
  return model, lambda logits: jnp.mean(loss_fn(logits, onehot))


def paper_grad_avg(run, state, n=4096):
  """The paper's "last gradients average", recomputed from a checkpoint.

  The paper logs the mean of the loss gradient of the first layer's
  weights: the first conv kernel (control) or the first head's x weights
  of the first layer (attention models), at its last training batch. Ours:
  the same mean at the run's final checkpoint on the first ``n`` training
  images (one batch of the paper's size, train mode); ``state``: that
  checkpoint (``studies.probed``). None when the model has no first layer.
  """
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  # The attention-free baseline (layers=0) has no first layer: nothing to
  # compare with the paper's column.
  if not {"conv1", "layer0"} & set(state["params"]):
    return None
  cfg = run.config
  x, y = studies.load_images(cfg, cfg.data.train_split, n)
  model, mean_loss = _model_and_loss(cfg, y)
  stats = state.get("batch_stats") or {}

  def loss(params):
    if stats:   # BatchNorm in train mode, as in the training step
      logits, _ = model.apply({"params": params, "batch_stats": stats}, x,
                              train=True, mutable=["batch_stats"])
    else:
      logits = model.apply({"params": params}, x, train=True)
    return mean_loss(logits)

  g = jax.jit(jax.grad(loss))(state["params"])
  leaf = g["conv1"]["kernel"] if "conv1" in g else g["layer0"]["x_weights"][0]
  return float(jnp.mean(leaf))


def first_steps(config, x, y, steps: int = 3) -> list[dict]:
  """What the first optimizer steps do to a model's ReLUs, from its config.

  A fresh init of ``config.model`` (key ``config.seed``), then ``steps``
  full-batch steps of the config's own optimizer (``softattn.optim``: for
  the separate-optimizer runs, lr 0.1 on the attention weights and 1e-3
  elsewhere) on ``(x, y)``. Per step (0 = init): the mean loss, the
  fraction of each layer's outputs that are > 0 (``alive``; a ReLU with no
  positive output passes no gradient), the largest output, the conv
  biases, and the gradient norm of everything but the head. Explains a
  run that sits at chance with zero layer gradients; it is a probe of the
  same recipe, not a replay of the run (other init key, one batch).
  """
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  from softattn import optim  # pylint: disable=g-import-not-at-top
  model, mean_loss = _model_and_loss(config, y)
  variables = model.init(jax.random.PRNGKey(config.seed), x[:1])
  if "batch_stats" in variables:
    raise ValueError("first_steps probes models without BatchNorm "
                     "(batch statistics are not stepped); use bn=False")
  params = variables["params"]
  # A declared (unresolved) config has no total_steps yet; the probe's
  # few steps only need the schedule's start.
  tx, _ = optim.make_optimizer(config, config.get("total_steps") or steps)

  @jax.jit
  def probe(p):
    """Loss, each layer's output and the gradient: one forward pass."""
    def loss(p):
      logits, inter = model.apply({"params": p}, x, train=True,
                                  capture_intermediates=True,
                                  mutable=["intermediates"])
      return mean_loss(logits), {
          k: v["__call__"][0] for k, v in inter["intermediates"].items()
          if k.startswith("layer")}
    (value, outs), g = jax.value_and_grad(loss, has_aux=True)(p)
    return value, outs, g

  @jax.jit
  def step(p, g, s):
    u, s = tx.update(g, s, p)
    return optax.apply_updates(p, u), s

  state, rows = tx.init(params), []
  for i in range(steps + 1):
    value, outs, g = probe(params)
    gnorm = optax.tree.norm({k: v for k, v in g.items() if k != "head"})
    rows.append({
        "step": i, "loss": float(value), "grad_norm_layers": float(gnorm),
        "alive": {k: float(jnp.mean(v > 0)) for k, v in sorted(outs.items())},
        "max_out": {k: float(jnp.max(v)) for k, v in sorted(outs.items())},
        "conv_bias": {k: float(params[k]["conv"]["bias"][0])
                      for k in sorted(outs)}})
    if i < steps:
      params, state = step(params, g, state)
  return rows


def first_head_weights(params) -> dict[str, float] | None:
  """Mean and std of the first layer's first-head x and y weights, and the
  share of both within ``±WEIGHT_BAND``: the paper's check of trained
  weights (Sec. 3 for model G: "most values within [-0.05, 0.05], the y
  weights having a smaller standard deviation"; the appendix for B without
  skip: x mean 0.0007, std 0.0208). None for a model without them (the
  control). At the N(0, 0.02) init 98.8 % lie in the band already, so the
  claims on these numbers also need the weights to have moved.
  """
  layer = params.get("layer0") or {}
  if "x_weights" not in layer:
    return None
  x = np.asarray(layer["x_weights"][0], np.float64)
  y = np.asarray(layer["y_weights"][0], np.float64)
  both = np.abs(np.concatenate([x.ravel(), y.ravel()]))
  return {"x_mean": float(x.mean()), "x_std": float(x.std()),
          "y_mean": float(y.mean()), "y_std": float(y.std()),
          "within_band": float(np.mean(both <= WEIGHT_BAND))}


def branch_effect(run, state, n: int = 10_000) -> float | None:
  """Test accuracy (fraction) lost when the attention branch is removed.

  Each attention layer computes ``ReLU([BN](conv(heads) + b + x))``;
  zeroing every layer's conv kernel (the bias kept) leaves
  ``ReLU([BN](b + x))``, the same network without its attention. The
  difference of the two accuracies on the first ``n`` test images, both in
  eval mode from the run's final checkpoint. None for a model without
  attention layers (the control, the attention-free baseline).
  """
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  params = state["params"]
  ablated = without_branch(params)
  if ablated is None:
    return None
  cfg = run.config
  x, y = studies.load_images(cfg, cfg.data.eval_split, n)
  model, _ = _model_and_loss(cfg, y)
  extra = ({"batch_stats": state["batch_stats"]}
           if state.get("batch_stats") else {})

  @jax.jit
  def accuracy(p):
    logits = model.apply({"params": p, **extra}, x, train=False)
    return jnp.mean(jnp.argmax(logits, -1) == y)

  return float(accuracy(params) - accuracy(ablated))


def without_branch(params):
  """``params`` with every attention layer's conv kernel zeroed (biases and
  everything else shared), or None for a model without attention layers."""
  layers = [k for k in params if k.startswith("layer") and
            "conv" in params[k]]
  if not layers:
    return None
  return {**params, **{k: {**params[k], "conv": {
      **params[k]["conv"],
      "kernel": np.zeros_like(params[k]["conv"]["kernel"])}}
      for k in layers}}
