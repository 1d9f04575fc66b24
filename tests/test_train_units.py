"""Unit tests of the training loop's pieces: losses, optimizers, sharding, metrics, probes."""

import json
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, PartitionSpec as P

from softattn import (config_files, configlib, evaluate, fewshot, losses,
                      metrics, optim, sharding)


# ---------------------------------------------------------------- losses


def test_softmax_xent_matches_optax_and_smoothing():
  logits = jax.random.normal(jax.random.key(0), (4, 7))
  labels = jnp.array([0, 3, 6, 2])
  onehot = jax.nn.one_hot(labels, 7)
  np.testing.assert_allclose(
      losses.softmax_xent(logits, onehot),
      optax.softmax_cross_entropy_with_integer_labels(logits, labels), rtol=1e-6)
  sm = losses.smooth_labels(onehot, 0.1)
  np.testing.assert_allclose(sm.sum(-1), 1.0, rtol=1e-6)
  np.testing.assert_allclose(sm[0, 0], 0.9 + 0.1 / 7, rtol=1e-6)
  np.testing.assert_allclose(
      losses.softmax_xent(logits, sm),
      optax.softmax_cross_entropy(logits, optax.smooth_labels(onehot, 0.1)),
      rtol=1e-6)


def test_sigmoid_xent_sums_over_classes():
  logits = jnp.array([[2.0, -1.0, 0.5]])
  y = jnp.array([[1.0, 0.0, 0.0]])
  expected = optax.sigmoid_binary_cross_entropy(logits, y).sum(-1)
  np.testing.assert_allclose(losses.sigmoid_xent(logits, y), expected, rtol=1e-6)


def test_normsoftmax_xent_scale_invariant_and_clipped():
  logits = jax.random.normal(jax.random.key(1), (3, 10))
  y = jax.nn.one_hot(jnp.array([1, 2, 3]), 10)
  a = losses.normsoftmax_xent(logits, y)  # gamma = inf: invariant to scale
  b = losses.normsoftmax_xent(17.0 * logits + 3.0, y)
  np.testing.assert_allclose(a, b, rtol=1e-4)
  # gamma=1 with std > 1: divides by 1, i.e. plain softmax (shift invariant).
  big = 5.0 * logits
  np.testing.assert_allclose(losses.normsoftmax_xent(big, y, gamma=1.0),
                             losses.softmax_xent(big, y), rtol=1e-4)
  with pytest.raises(ValueError, match="softmax_xent"):
    losses.get("cross_entropy")


def test_normalized_xent_is_the_registry_normalizer_in_the_loss():
  logits = 3.0 * jax.random.normal(jax.random.key(2), (4, 10)) + 1.0
  y = jax.nn.one_hot(jnp.array([0, 3, 5, 9]), 10)
  # NormSoftmax through the registry equals the hand-written loss.
  np.testing.assert_allclose(
      losses.normalized_xent(logits, y, normalizer="normsoftmax(gamma=1)"),
      losses.normsoftmax_xent(logits, y, gamma=1.0), rtol=1e-5)
  # LogitNorm (tau = K^-1/2 by default) against a float64 formula; it is not
  # shift invariant, unlike NormSoftmax.
  z = np.asarray(logits, np.float64)
  t = z / (np.linalg.norm(z, axis=-1, keepdims=True) / np.sqrt(10))
  want = -np.sum(np.asarray(y) * (t - np.log(np.exp(t).sum(-1, keepdims=True))),
                 axis=-1)
  got = losses.normalized_xent(logits, y, normalizer="logitnorm")
  np.testing.assert_allclose(got, want, rtol=1e-5)
  shifted = losses.normalized_xent(logits + 5.0, y, normalizer="logitnorm")
  assert np.abs(np.asarray(shifted) - np.asarray(got)).max() > 1e-2
  grad = jax.grad(lambda z: losses.normalized_xent(
      z, y, normalizer="logitnorm").sum())(logits)
  assert np.isfinite(np.asarray(grad)).all()


def test_loss_parameters_are_checked_when_the_loss_is_built():
  cfg = configlib.default_config()
  cfg.loss.name, cfg.loss.normalizer = "normalized_xent", "logitnorm(tau=0.5)"
  logits = jnp.array([[1.0, 2.0, 3.0]])
  y = jax.nn.one_hot(jnp.array([2]), 3)
  np.testing.assert_allclose(
      losses.from_config(cfg.loss)(logits, y),
      losses.normalized_xent(logits, y, normalizer="logitnorm(tau=0.5)"))
  with pytest.raises(ValueError, match="remove config.loss.gamma"):
    losses.get("softmax_xent", gamma=1.0)
  with pytest.raises(ValueError, match="exp-mode.*'logitnorm'"):
    losses.get("normalized_xent", normalizer="relu_seqlen")
  with pytest.raises(ValueError, match="needs parameter"):
    losses.get("normalized_xent", normalizer="normsoftmax_learnable")
  cfg.loss.normalizer = "nope"
  with pytest.raises(configlib.ConfigError, match="valid names"):
    configlib.resolve_config(cfg)


# ---------------------------------------------------------------- optim


def _cfg(**kw):
  return ml_collections.ConfigDict(kw)


def test_warmup_cosine_schedule_endpoints():
  s = optim.make_schedule(_cfg(name="warmup_cosine", base_lr=1.0, warmup_steps=10,
                               init_lr=0.2), total_steps=110)
  np.testing.assert_allclose(s(0), 0.2, rtol=1e-6)
  np.testing.assert_allclose(s(10), 1.0, rtol=1e-6)
  np.testing.assert_allclose(s(60), 0.5, rtol=1e-5)
  np.testing.assert_allclose(s(110), 0.0, atol=1e-6)


def test_step_schedule_in_epochs():
  s = optim.make_schedule(_cfg(name="step", base_lr=0.1, boundary_epochs=[2, 3],
                               decay_factor=0.1), total_steps=50, steps_per_epoch=10)
  np.testing.assert_allclose([s(19), s(20), s(29), s(30)],
                             [0.1, 0.01, 0.01, 0.001], rtol=1e-5)
  with pytest.raises(ValueError, match="config.schedule.name"):
    optim.make_schedule(_cfg(name="cosine"), total_steps=5)


def test_param_groups_get_their_own_lr():
  params = {"attn": {"w": jnp.ones((2, 2))}, "mlp": {"kernel": jnp.ones((2, 2))}}
  config = _cfg(
      optimizer=dict(name="adam", groups=[dict(pattern="^attn/", name="sgd",
                                               base_lr=0.1, momentum=0.0)]),
      schedule=dict(name="constant", base_lr=1e-3))
  tx, _ = optim.make_optimizer(config, total_steps=10)
  grads = jax.tree.map(jnp.ones_like, params)
  updates, _ = tx.update(grads, tx.init(params), params)
  np.testing.assert_allclose(updates["attn"]["w"], -0.1)  # plain SGD step
  np.testing.assert_allclose(updates["mlp"]["kernel"], -1e-3, rtol=1e-3)  # Adam


def test_grad_clipping_and_decoupled_decay_mask():
  params = {"kernel": jnp.ones((2, 2)), "bias": jnp.ones((2,))}
  config = _cfg(optimizer=dict(name="sgd", momentum=0.0, weight_decay=0.5,
                               grad_clip_norm=1.0),
                schedule=dict(name="constant", base_lr=1.0))
  tx, _ = optim.make_optimizer(config, total_steps=10)
  grads = {"kernel": jnp.full((2, 2), 100.0), "bias": jnp.zeros((2,))}
  updates, _ = tx.update(grads, tx.init(params), params)
  # clipped grad has norm 1 -> entries 0.5; decay 0.5 on the kernel only.
  np.testing.assert_allclose(updates["kernel"], -(0.5 + 0.5), rtol=1e-5)
  np.testing.assert_allclose(updates["bias"], 0.0)


# ---------------------------------------------------------------- sharding


def test_mesh_shape_and_errors():
  assert sharding.mesh_shape({"data": -1, "model": 2}, 8) == (4, 2)
  assert sharding.mesh_shape({"data": 4, "model": 2}, 8) == (4, 2)
  with pytest.raises(ValueError, match="valid axes"):
    sharding.mesh_shape({"batch": 2}, 8)
  with pytest.raises(ValueError, match="shrink config.mesh"):
    sharding.mesh_shape({"data": 16, "model": 1}, 8)


def test_sharding_rules_pick_divisible_dims():
  devices = np.array(jax.devices() * 8)[:8].reshape(4, 2)  # specs only
  mesh = Mesh(devices, ("data", "model"))
  tree = {"Block/Dense/kernel": jax.ShapeDtypeStruct((64, 6), jnp.float32),
          "Block/Dense/bias": jax.ShapeDtypeStruct((6,), jnp.float32),
          "odd": jax.ShapeDtypeStruct((3, 5), jnp.float32)}
  specs = {k: sharding._spec_for(v.shape, s, mesh) for (k, v), s in zip(
      tree.items(), ["fsdp_tp", "fsdp", "fsdp_tp"])}
  assert specs["Block/Dense/kernel"] == P("data", "model")
  assert specs["Block/Dense/bias"] == P(None)  # 6 % 4 != 0: replicated
  assert specs["odd"] == P(None, None)
  with pytest.raises(ValueError, match="sharding strategy"):
    sharding.check_rules([(".*", "zero3")])


# ---------------------------------------------------------------- configs


def test_parse_arg_types_and_nested_commas():
  a = config_files.parse_arg("variant=S/16,normalizer=relu_seqlen(alpha=1, act=gelu),"
                          "steps=5,lr=0.5,runlocal",
                          variant="Ti/16", normalizer="softmax", steps=1,
                          lr=1.0, runlocal=False)
  assert a.variant == "S/16" and a.normalizer == "relu_seqlen(alpha=1, act=gelu)"
  assert a.steps == 5 and a.lr == 0.5 and a.runlocal is True
  with pytest.raises(ValueError, match="valid"):
    config_files.parse_arg("varaint=S/16", variant="Ti/16")


# ---------------------------------------------------------------- metrics


def test_jsonl_writer_splits_by_prefix(tmp_path):
  w = metrics.JsonlWriter(str(tmp_path / "metrics.jsonl"))
  w.write_scalars(5, {"train/loss": np.float32(1.5), "eval/accuracy": 0.25,
                      "train/bad": float("nan")})
  w.close()
  recs = metrics.read_jsonl(str(tmp_path / "metrics.jsonl"))
  assert {"step": 5, "split": "train", "loss": 1.5, "bad": "nan"} in recs
  assert {"step": 5, "split": "eval", "accuracy": 0.25} in recs
  for line in open(tmp_path / "metrics.jsonl"):
    json.loads(line)  # strict JSON (no bare NaN)


# ---------------------------------------------------------------- eval


def test_ridge_probe_separable_features():
  rng = np.random.default_rng(0)
  centers = rng.normal(size=(5, 16)) * 4
  ytr = np.repeat(np.arange(5), 10)
  yte = np.repeat(np.arange(5), 20)
  xtr = centers[ytr] + rng.normal(size=(50, 16))
  xte = centers[yte] + rng.normal(size=(100, 16))
  idx = fewshot.sample_shots(ytr, 3, seed=0)
  assert len(idx) == 15 and set(np.bincount(ytr[idx])) == {3}
  assert fewshot.ridge_probe(xtr[idx], ytr[idx], xte, yte, 5, l2_reg=1.0) > 0.9
  # Random labels: chance level.
  assert fewshot.ridge_probe(xtr, rng.permutation(ytr), xte, yte, 5, 1.0) < 0.6


def test_i1k_indices_from_a_shuffled_superset(tmp_path):
  i1k = evaluate.i1k_wnids()
  extra = [f"n9{i:07d}" for i in range(50)]
  i21k = sorted(i1k + extra)
  idx = evaluate.i1k_indices(i21k)
  assert [i21k[i] for i in idx] == i1k
  logits = jnp.arange(len(i21k), dtype=jnp.float32)[None]
  np.testing.assert_array_equal(evaluate.restrict_logits(logits, idx)[0], idx)
  with pytest.raises(ValueError, match="not in the i21k list"):
    evaluate.i1k_indices(i21k[5:])
  p = tmp_path / "wnids.txt"
  p.write_text("\n".join(i21k) + "\n")
  assert evaluate.read_wnids(str(p)) == i21k
  with pytest.raises(FileNotFoundError, match="i21k_wnids_file"):
    evaluate.read_wnids(os.path.join(tmp_path, "missing.txt"))


def test_shipped_i1k_table_is_the_default_and_missing_class_never_wins():
  idx = evaluate.default_i1k_indices(None)
  assert idx.shape == (1000,) and (idx == -1).sum() == 1
  assert idx[850] == -1  # teddy bear is not in fall11 ImageNet-21k
  logits = jnp.zeros((2, 21_843)).at[:, 0].set(-5.0)
  restricted = evaluate.restrict_logits(logits, idx)
  assert restricted.shape == (2, 1000)
  assert bool(jnp.all(jnp.isneginf(restricted[:, 850])))
  assert int(jnp.argmax(restricted[0])) != 850


# ---------------------------------------------------------------- runstate


def test_recorder_adds_this_attempt_to_the_recorded_times(tmp_path):
  from softattn import runstate  # pylint: disable=g-import-not-at-top
  runstate.write(str(tmp_path), runstate.Status(
      state=runstate.State.PREEMPTED, step=5, core_seconds=7.0,
      wall_seconds=100.0))
  rec = runstate.Recorder(str(tmp_path))
  sum(i * i for i in range(200_000))   # some CPU time in this attempt
  rec.update(step=6)
  st = runstate.read(str(tmp_path))
  assert st.state == runstate.State.RUNNING and st.step == 6
  assert 100.0 < st.wall_seconds < 160.0 and 7.0 < st.core_seconds < 67.0
  # A status written before the field existed reads as 0, not an error.
  legacy = runstate.Status.from_json({"state": "done", "step": 3})
  assert legacy.wall_seconds == 0.0
