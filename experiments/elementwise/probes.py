"""Checkpoint probes of the element-wise study, run when exporting runs.csv
(``record``, the study's probe hook; each probe's docstring says what it
measures)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from softattn import configlib, losses, optim
import softattn_studies as studies

# The paper's "most values within [-0.05, 0.05]" (Sec. 3, model G).
WEIGHT_BAND = 0.05


def _model_and_loss(config, y):
  """``(model, mean_loss(logits))`` of a run's config against labels ``y``
  (the config's loss and label smoothing, as in training)."""
  model = configlib.build_model(config)   # classes from the dataset's facts
  onehot = jax.nn.one_hot(y, model.num_classes)
  if config.loss.get("label_smoothing"):
    onehot = losses.smooth_labels(onehot, config.loss.label_smoothing)
  loss_fn = losses.from_config(config.loss)
  return model, lambda logits: jnp.mean(loss_fn(logits, onehot))


def paper_grad_avg(run, state, n=4096):
  """The paper's "last gradients average" (the mean loss gradient of the
  first conv kernel, or of the first layer's first-head x weights, at its
  last batch), at the run's final checkpoint ``state`` on the first ``n``
  training images, train mode. None without a first layer (layers=0)."""
  if not {"conv1", "layer0"} & set(state["params"]):
    return None
  cfg = run.config
  x, y = studies.load_images(cfg, cfg.data.train_split, n)
  model, mean_loss = _model_and_loss(cfg, y)
  extra = studies.batch_stats(state)

  def loss(params):   # BatchNorm in train mode, as in the training step
    out = model.apply({"params": params, **extra}, x, train=True,
                      mutable=list(extra) or False)
    return mean_loss(out[0] if extra else out)

  g = jax.jit(jax.grad(loss))(state["params"])
  leaf = g["conv1"]["kernel"] if "conv1" in g else g["layer0"]["x_weights"][0]
  return float(jnp.mean(leaf))


def first_steps(config, x, y, steps: int = 3) -> list[dict]:
  """What the first optimizer steps do to a model's ReLUs (why B without
  skip sits at chance): a fresh init of ``config`` and ``steps`` full-batch
  steps of its own optimizer on ``(x, y)`` (the same recipe, not a replay
  of the run). Per step (0 = init): the loss, each layer's share of
  outputs > 0 (``alive``: a ReLU with none passes no gradient), its
  largest output and conv bias, the gradient norm of all but the head."""
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
  """The std of the first layer's first-head x and y weights and the
  share of both within ``±WEIGHT_BAND``: what the paper prints of trained
  weights (Sec. 3, model G; the appendix, B without skip). None without
  them (the control)."""
  layer = params.get("layer0") or {}
  if "x_weights" not in layer:
    return None
  x = np.asarray(layer["x_weights"][0], np.float64)
  y = np.asarray(layer["y_weights"][0], np.float64)
  both = np.abs(np.concatenate([x.ravel(), y.ravel()]))
  return {"x_std": float(x.std()), "y_std": float(y.std()),
          "within_band": float(np.mean(both <= WEIGHT_BAND))}


def branch_effect(run, state, n: int = 10_000) -> float | None:
  """Test accuracy (fraction) lost when the attention branch is removed:
  a layer ``ReLU([BN](conv(heads) + b + x))`` with its conv kernel zeroed
  is ``ReLU([BN](b + x))``, the network without its attention. On the
  first ``n`` test images, eval mode, from the final checkpoint ``state``;
  None without attention layers."""
  params = state["params"]
  ablated = without_branch(params)
  if ablated is None:
    return None
  cfg = run.config
  x, y = studies.load_images(cfg, cfg.data.eval_split, n)
  model, _ = _model_and_loss(cfg, y)
  extra = studies.batch_stats(state)

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


def record(runs, cache_dir):
  """The study's probe hook: each finished run's probe values into its
  metrics, and ``first_steps`` for the lowest seed of B without skip at
  10 epochs. Not the control's 1-step timing runs: no trained-model number
  means anything there, and each would cost another control step."""
  del cache_dir
  noskip = None
  for r, state in studies.probed(runs, lambda r: r.part != "control_step"):
    g = paper_grad_avg(r, state)
    if g is not None:   # an exact 0 (a dead first layer) reads as 1e-30
      r.metrics.update({"value/grad_avg": g, "value/abs_grad_avg": abs(g),
                        "value/log10_abs_grad_avg": float(
                            np.log10(max(abs(g), 1e-30)))})
    w = first_head_weights(state["params"])
    if w is not None:
      r.metrics.update({"value/x_w_std": w["x_std"],
                        "value/y_over_x_std": w["y_std"] / w["x_std"],
                        "value/w_within_band": w["within_band"]})
    if r.config.model_name == "elementwise":
      got = {"value/attn_moved": studies.moved_from_init(
          r.config, state, r"(x|y)_weights"),
             "value/branch_effect": branch_effect(r, state)}
      r.metrics.update({k: v for k, v in got.items() if v is not None})
    if (r.part == "separate_10ep" and noskip is None
        and not r.get("model.skip")):
      noskip = r
      x, y = studies.load_images(r.config, r.config.data.train_split, 4096)
      r.probes["first_steps"] = first_steps(r.config, x, y)
