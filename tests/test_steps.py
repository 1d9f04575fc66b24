"""The step math (softattn.steps), the config schema and itstime, called directly.

No mesh and no train.make_steps: the functions are pure functions of
(settings, state or params, batch), so each is checked against what it
should compute. They are jitted here only because eager dispatch of a ViT's
gradient costs a minute of CPU.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from softattn import configlib, losses, sharding, steps, train
from softattn.models.vit import ViT

NUM_CLASSES = 5


def _settings(**kw):
  model = ViT(
      num_classes=NUM_CLASSES, patch_size=4, width=16, depth=1,
      mlp_dim=32, num_heads=2, head_zeroinit=False, dropout=kw.pop("dropout", 0.0))
  kw.setdefault("tx", optax.sgd(0.5))
  return steps.Settings(model=model, loss=losses.softmax_xent,
                        num_classes=NUM_CLASSES, seed=3, **kw)


def _state(s):
  params = jax.jit(s.model.init)(jax.random.key(0),
                                 jnp.zeros((1, 8, 8, 3)))["params"]
  state = {"step": jnp.zeros((), jnp.int32), "params": params,
           "batch_stats": {}, "opt_state": s.tx.init(params)}
  if s.ema_decay:
    state["ema_params"] = jax.tree.map(lambda p: p * 0.5, params)
  return state


def _batch(n=6, seed=1):
  rng = np.random.default_rng(seed)
  return {"image": jnp.asarray(rng.normal(size=(n, 8, 8, 3)), jnp.float32),
          "label": jnp.asarray(rng.integers(0, NUM_CLASSES, n), jnp.int32),
          "mask": jnp.ones((n,), bool)}


def _jit(fn, s, **kw):
  return jax.jit(functools.partial(fn, s, **kw))


def test_train_step_is_the_optimizer_on_the_loss_gradient():
  s = _settings(dropout=0.1)
  state, batch = _state(s), _batch()
  train_step = _jit(steps.train_step, s)
  new, m = train_step(state, batch)
  # The same randomness: fold_in(key(seed), step), split into (mix, dropout).
  _, drop_rng = jax.random.split(steps.step_rng(s, 0))
  targets = jax.nn.one_hot(batch["label"], NUM_CLASSES)
  (loss, _), grads = jax.jit(jax.value_and_grad(
      lambda p: steps.loss_fn(s, p, {}, batch["image"], targets, drop_rng),
      has_aux=True))(state["params"])
  np.testing.assert_allclose(m["loss"], loss, rtol=1e-6)
  for got, p, g in zip(jax.tree.leaves(new["params"]),
                       jax.tree.leaves(state["params"]), jax.tree.leaves(grads)):
    np.testing.assert_allclose(got, p - 0.5 * g, rtol=1e-5, atol=1e-6)
  assert int(new["step"]) == 1 and bool(jnp.all(m["grads_finite"]))
  assert int(m["nonfinite_grads"]) == 0
  np.testing.assert_allclose(m["grad_norm"], optax.tree.norm(grads), rtol=1e-5)
  # Step k's randomness is a function of (seed, k): same step, same result;
  # the next step draws other dropout masks.
  _, m2 = train_step(state, batch)
  assert float(m2["loss"]) == float(m["loss"])
  _, m3 = train_step(dict(state, step=jnp.ones((), jnp.int32)), batch)
  assert float(m3["loss"]) != float(m["loss"])


def test_train_step_updates_the_ema_and_counts_nonfinite_gradients():
  s = _settings(ema_decay=0.9)
  state = _state(s)
  train_step = _jit(steps.train_step, s)
  new, _ = train_step(state, _batch())
  for e, e0, p in zip(jax.tree.leaves(new["ema_params"]),
                      jax.tree.leaves(state["ema_params"]),
                      jax.tree.leaves(new["params"])):
    np.testing.assert_allclose(e, 0.9 * e0 + 0.1 * p, rtol=1e-5, atol=1e-7)
  batch = _batch()
  batch["image"] = batch["image"].at[0, 0, 0, 0].set(jnp.nan)
  _, m = train_step(state, batch)
  assert not np.isfinite(float(m["loss"])) and int(m["nonfinite_grads"]) > 0
  assert not bool(jnp.all(m["grads_finite"]))


def test_training_targets_smoothing_and_mixup():
  s = _settings(label_smoothing=0.1)
  batch = _batch()
  images, targets = steps.images_and_targets(s, jax.random.key(0), batch)
  assert images is batch["image"]
  np.testing.assert_allclose(targets.sum(-1), 1.0, rtol=1e-6)
  np.testing.assert_allclose(
      targets[np.arange(6), batch["label"]], 0.9 + 0.1 / NUM_CLASSES, rtol=1e-6)
  s = _settings(mixup_alpha=1.0)
  images, targets = steps.images_and_targets(s, jax.random.key(0), batch)
  assert not np.allclose(images, batch["image"])
  np.testing.assert_allclose(targets.sum(-1), 1.0, rtol=1e-6)
  assert int(jnp.max(jnp.sum(targets > 0, -1))) == 2  # two labels mixed


def test_eval_step_counts_only_real_examples_and_restricts_classes():
  s = _settings()
  state, batch = _state(s), _batch()
  batch["mask"] = jnp.array([True] * 4 + [False] * 2)
  out = _jit(steps.eval_step, s)(state["params"], {}, batch)
  logits, _ = _jit(steps.forward, s, train=False)(state["params"], {},
                                                 batch["image"])
  per = losses.softmax_xent(logits, jax.nn.one_hot(batch["label"], NUM_CLASSES))
  assert float(out["count"]) == 4.0
  np.testing.assert_allclose(out["loss_sum"], per[:4].sum(), rtol=1e-5)
  correct = np.argmax(logits, -1)[:4] == np.asarray(batch["label"])[:4]
  assert float(out["correct"]) == correct.sum()
  # Restricted to classes (1, 3): label j means class_indices[j].
  batch["label"] = jnp.array([0, 1, 0, 1, 0, 1])
  out = _jit(steps.eval_step, s, class_indices=np.array([1, 3]))(
      state["params"], {}, batch)
  sub = np.asarray(logits)[:, [1, 3]]
  assert float(out["correct"]) == (np.argmax(sub, -1) == [0, 1, 0, 1, 0, 1])[:4].sum()


def test_diagnostics_and_features():
  s = _settings()
  state, batch = _state(s), _batch()
  diag = _jit(steps.diagnostics_step, s)(state, batch)
  assert any(k.startswith("diag/") and k.endswith("score_std") for k in diag)
  assert "grad_norm/head" in diag and "param_norm/head" in diag
  feats = _jit(steps.features_step, s)(state["params"], {}, batch["image"])
  assert feats.shape == (6, 16) and feats.dtype == jnp.float32


def test_settings_from_a_resolved_config():
  config = configlib.default_config()
  config.data.name = "fashion_mnist"
  config.total_steps = 3
  config.loss.update(dict(name="normsoftmax_xent", gamma=2.0, mixup_alpha=0.2,
                          label_smoothing=0.1))
  config.optimizer.ema_decay = 0.99
  cfg, _ = configlib.resolve_config(config, num_devices=1, dataset_info=dict(
      num_classes=7, image_shape=(8, 8, 3), num_train=10, num_eval=10))
  s = steps.Settings.from_config(cfg, model=None, tx=optax.sgd(1.0),
                                 schedule=optax.constant_schedule(1.0))
  assert (s.num_classes, s.mixup_alpha, s.label_smoothing, s.ema_decay) == (
      7, 0.2, 0.1, 0.99)
  logits, y = jnp.array([[1.0, 2.0]]), jnp.array([[0.0, 1.0]])
  np.testing.assert_allclose(s.loss(logits, y),
                             losses.get("normsoftmax_xent", gamma=2.0)(logits, y))


@pytest.mark.parametrize("step, every, total, last, due", [
    (10, 5, 100, True, True), (11, 5, 100, True, False),
    (100, 7, 100, True, True), (100, 7, 100, False, False),
    (100, 0, 100, True, True), (50, 0, 100, True, False),
    (50, None, 100, True, False)])
def test_itstime(step, every, total, last, due):
  assert train.itstime(step, every, total, last=last) is due


# ---------------------------------------------------------------- schema


def test_known_keys_are_the_defaults_keys():
  top, sections = configlib.known_keys()
  defaults = configlib.default_config()
  assert top == set(defaults.keys())
  assert sections["schedule"] == set(defaults.schedule.keys())
  assert {"boundaries", "warmup_epochs", "decay_factor"} <= sections["schedule"]
  assert "groups" in sections["optimizer"]
  assert not {"data", "model", "fewshot", "mesh"} & set(sections)


@pytest.mark.parametrize("section, key", [
    ("optimizer", "lr"), ("schedule", "warmup"), ("loss", "smoothing"),
    ("eval", "batch"), ("init_from", "file")])
def test_a_typo_in_a_checked_section_names_the_valid_keys(section, key):
  config = configlib.default_config()
  config[section][key] = 1
  with pytest.raises(configlib.ConfigError,
                     match=rf"\['{key}'\] in config\.{section}; valid keys") as e:
    configlib.check_keys(config)
  assert "\n" not in str(e.value)


def test_free_form_sections_and_optional_fields_are_accepted():
  config = configlib.default_config()
  config.data.anything = 1
  config.model.anything = 2
  config.fewshot.shots = [1, 5]
  config.optimizer.groups = [dict(pattern="attn", name="sgd", base_lr=0.1)]
  config.schedule.boundaries = [10, 20]
  configlib.check_keys(config)


def test_dataset_info_skips_the_dataset_lookup():
  config = configlib.default_config()
  config.data.name = "imagenet21k"  # not prepared on this machine
  config.num_epochs = 2.0
  with pytest.raises(configlib.ConfigError, match="imagenet21k"):
    configlib.resolve_config(config, num_devices=1)
  info = dict(num_classes=21843, image_shape=(224, 224, 3), num_train=1280,
              num_eval=128)
  cfg, got = configlib.resolve_config(config, num_devices=1, dataset_info=info)
  assert got == info and cfg.model.num_classes == 21843
  assert cfg.total_steps == 2 * 1280 // 128


# ---------------------------------------------------------------- sharding


def test_without_data_axis_keeps_model_sharding():
  mesh = Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1), ("data", "model"))
  for spec, want in [(P("data", "model"), P(None, "model")),
                     (P(None, "data"), P(None, None)),
                     (P(("data", "model")), P("model")), (P(), P())]:
    assert sharding.without_data_axis(NamedSharding(mesh, spec)).spec == want
  params = {"w": jnp.ones((4, 2))}
  assert sharding.gather_for_compute(params, [(".*", "fsdp")], None) is params


def test_config_schema_has_no_trainer_import():
  import subprocess, sys  # pylint: disable=g-import-not-at-top,multiple-imports
  code = ("import sys; from softattn import configlib; "
          "configlib.default_config(); "
          "assert 'softattn.train' not in sys.modules, 'trainer imported'")
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                        text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-2000:]


def test_settings_are_frozen():
  s = _settings()
  with pytest.raises(Exception):
    s.seed = 1  # a jitted partial(train_step, s) must not see it change


def test_forward_traces_under_the_mesh_so_pallas_attention_shards_itself():
  """With a mesh in the settings, the model traces with it as context: the
  Pallas attention kernels (which XLA cannot partition) wrap themselves in
  shard_map over it; without one they are called directly."""
  model = ViT(
      num_classes=NUM_CLASSES, patch_size=4, width=16, depth=1,
      mlp_dim=32, num_heads=2, implementation="pallas")
  params = jax.jit(model.init)(jax.random.key(0),
                               jnp.zeros((1, 8, 8, 3)))["params"]
  mesh = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("data", "model"))
  images = _batch()["image"]

  def jaxpr(mesh_):
    s = steps.Settings(model=model, loss=losses.softmax_xent, tx=optax.sgd(0.1),
                       num_classes=NUM_CLASSES, seed=0, mesh=mesh_)
    return str(jax.make_jaxpr(lambda p: steps.forward(
        s, p, {}, images, train=False)[0])(params))

  assert "shard_map" in jaxpr(mesh)
  assert "shard_map" not in jaxpr(None)
