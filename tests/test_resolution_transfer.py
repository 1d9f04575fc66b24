"""A trained ViT at another resolution: posemb resampling, the transfer
config."""

import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.ndimage

from softattn import config_files, metrics
from softattn.data import pipeline
from softattn.models.vit import (ViT, infer_grid, posemb_sincos_2d,
                                 resample_posemb)

sys.path.insert(0, os.path.dirname(__file__))
import train_runner  # pylint: disable=g-import-not-at-top,wrong-import-position

TRANSFER = os.path.join(train_runner.REPO, "configs", "transfer.py")


def test_resampling_to_the_same_grid_is_the_identity():
  pe = np.random.RandomState(0).randn(1, 1 + 5 * 3, 8).astype(np.float32)
  out = resample_posemb(pe, (5, 3), (5, 3), num_prefix=1)
  assert out.dtype == pe.dtype
  np.testing.assert_array_equal(out, pe)
  np.testing.assert_array_equal(resample_posemb(pe[:, 1:], (5, 3)),
                                pe[:, 1:])  # grid inferred from the aspect


def test_bilinear_resampling_keeps_a_linear_ramp_linear():
  gh, gw, nh, nw = 4, 6, 7, 9
  a, b, c = np.array([1.0, -2.0]), np.array([0.5, 3.0]), np.array([2.0, 0.0])
  ramp = lambda h, w, sy, sx: (  # noqa: E731
      a * (np.arange(h)[:, None, None] * sy)
      + b * (np.arange(w)[None, :, None] * sx) + c).reshape(1, h * w, 2)
  pe = ramp(gh, gw, 1.0, 1.0)
  out = resample_posemb(pe, (nh, nw), (gh, gw))
  # New row i sits at old row i (gh - 1) / (nh - 1): the same ramp there.
  np.testing.assert_allclose(out, ramp(nh, nw, (gh - 1) / (nh - 1),
                                       (gw - 1) / (nw - 1)), atol=1e-12)
  # Downsampling too; and the corners are kept.
  down = resample_posemb(pe, (2, 3), (gh, gw)).reshape(2, 3, 2)
  np.testing.assert_allclose(down[0, 0], pe[0, 0], atol=1e-12)
  np.testing.assert_allclose(down[-1, -1], pe[0, -1], atol=1e-12)
  # The sampling of scipy.ndimage.zoom(order=1) (big_vision's resampler).
  r = np.random.RandomState(1).randn(1, 16, 3)
  zoom = scipy.ndimage.zoom(r.reshape(4, 4, 3), (7 / 4, 7 / 4, 1), order=1)
  np.testing.assert_allclose(resample_posemb(r, (7, 7)),
                             zoom.reshape(1, 49, 3), atol=1e-10)


def test_grid_inference_and_errors():
  assert infer_grid(64, (4, 4)) == (8, 8)
  assert infer_grid(24, (2, 3)) == (4, 6)
  with pytest.raises(ValueError, match="no patch grid.*old_grid"):
    infer_grid(20, (4, 4))
  with pytest.raises(ValueError, match="has 12 cells"):
    resample_posemb(np.zeros((1, 16, 2)), (8, 8), (3, 4))


def _embedded(model, v, x):
  _, st = model.apply(v, x, capture_intermediates=True)
  inter = st["intermediates"]
  return inter["embedding"]["__call__"][0], inter["Dropout_0"]["__call__"][0]


def test_sincos_is_recomputed_for_the_new_grid():
  m = ViT(variant="mu/4", num_classes=3, posemb="sincos2d", pool="tok",
          num_registers=1)
  v = m.init(jax.random.key(0), jnp.zeros((1, 16, 16, 3)))
  x = jnp.asarray(np.random.RandomState(0).randn(1, 40, 24, 3), jnp.float32)
  patches, tokens = _embedded(m, v, x)  # a 10 x 6 grid now
  pe = tokens[:, 1:-1] - patches.reshape(1, 60, 32)
  np.testing.assert_allclose(pe, posemb_sincos_2d(10, 6, 32), atol=1e-5)


def test_unchanged_resolution_gives_identical_logits():
  """The resampled posemb at the trained grid is the trained one, so the
  model's logits are identical bit for bit."""
  x = jnp.asarray(np.random.RandomState(0).randn(2, 16, 16, 3), jnp.float32)
  for kw in (dict(pool="gap"), dict(pool="tok", posemb_with_cls=True)):
    m = ViT(variant="mu/4", num_classes=5, head_zeroinit=False, **kw)
    v = jax.tree.map(np.array, m.init(jax.random.key(1), x))
    y = jax.jit(m.apply)(v, x)
    prefix = int(kw.get("posemb_with_cls", False))
    v["params"]["pos_embedding"] = resample_posemb(
        v["params"]["pos_embedding"], (4, 4), num_prefix=prefix)
    np.testing.assert_array_equal(jax.jit(m.apply)(v, x), y)
    # At 32 x 32 (an 8 x 8 grid) the resampled model runs.
    v["params"]["pos_embedding"] = resample_posemb(
        v["params"]["pos_embedding"], (8, 8), num_prefix=prefix)
    assert m.apply(v, jnp.zeros((1, 32, 32, 3))).shape == (1, 5)


def test_image_size_ends_every_pp_string_with_a_resize():
  d = {"pp_train": "flip_lr|value_range(-1, 1)", "pp_eval": ""}
  assert pipeline.pp_string(d, "pp_train") == d["pp_train"]
  d["image_size"] = 48
  assert pipeline.pp_string(d, "pp_train") == (
      "flip_lr|value_range(-1, 1)|resize(48)")
  assert pipeline.pp_string(d, "pp_eval") == "resize(48)"
  d["image_size"] = (24, 40)
  assert pipeline.pp_string(d, "pp_eval") == "resize((24, 40))"
  assert pipeline.preprocessed_shape(pipeline.pp_string(d, "pp_eval"),
                                     (28, 28, 1)) == (24, 40, 1)


def test_transfer_config_is_a_sweepable_config(tmp_path):
  """Its knobs are fields a sweep overrides; without a source it is the
  quickstart at another size."""
  from softattn.sweep import declaration  # pylint: disable=g-import-not-at-top
  sweep = tmp_path / "sweep.py"
  sweep.write_text(
      "from softattn.sweep import declaration, grid\n"
      "def get_config(arg=None):\n"
      f"  return declaration.config_from_file({TRANSFER!r}, 'size=16')\n"
      "def get_sweep(arg=None):\n"
      "  return grid.product(grid.sweep('data.image_size', [16, 48]),\n"
      "                      grid.sweep('total_steps', [0, 300]))\n")
  runs = declaration.load(str(sweep)).runs
  assert [(r.config.data.image_size, r.config.total_steps) for r in runs] == [
      (16, 0), (16, 300), (48, 0), (48, 300)]
  with pytest.raises(ValueError, match="size=0 is invalid"):
    config_files.load_file(TRANSFER + ":size=0")
  with pytest.raises(ValueError, match="holds no config.json"):
    config_files.load_file(f"{TRANSFER}:from={tmp_path}")


@pytest.fixture(scope="module")
def source_run(tmp_path_factory):
  """A 3-step quickstart run with a learned posemb (28 px: a 7 x 7 grid)."""
  wd = tmp_path_factory.mktemp("source")
  final = train_runner.run(dict(
      config="configs/quickstart.py:runlocal", workdir=str(wd),
      num_examples=20, overrides={"checkpoint_async": False,
                                  "verbose": False, "model.posemb": "learn",
                                  "model.num_registers": 1}))
  return wd, final


def _transfer(src, wd, arg):
  return train_runner.run(dict(
      config=f"configs/transfer.py:from={src},{arg}", workdir=str(wd),
      num_examples=20, overrides={"checkpoint_async": False,
                                  "verbose": False}))


def test_evaluate_at_the_trained_size_repeats_the_source_eval(source_run,
                                                              tmp_path):
  src, final = source_run
  got = _transfer(src, tmp_path, "size=28")
  assert got["step"] == 0 and "train_loss" not in got  # evaluated only
  assert got["eval_loss"] == final["eval_loss"]
  assert got["eval_accuracy"] == final["eval_accuracy"]
  status = json.load(open(tmp_path / "status.json"))
  assert status["state"] == "done" and status["saved_step"] is None


def test_evaluate_and_fine_tune_at_another_size(source_run, tmp_path):
  src, _ = source_run
  got = _transfer(src, tmp_path / "at56", "size=56")
  assert np.isfinite(got["eval_loss"]) and got["step"] == 0
  info = [r["init_from"] for r in metrics.read_jsonl(
      str(tmp_path / "at56" / "metrics.jsonl"), "info") if "init_from" in r]
  assert "pos_embedding resampled 7x7 -> 14x14" in info[0]
  evals = metrics.read_jsonl(str(tmp_path / "at56" / "metrics.jsonl"), "eval")
  sinks = {k: v for k, v in evals[-1].items() if k.startswith("sink/")}
  assert sinks and all(np.isfinite(v) for v in sinks.values())
  assert not any(k.startswith("eval_sink") for k in got)  # logs only
  ft = _transfer(src, tmp_path / "ft", "size=56,steps=2,lr=1e-3")
  assert ft["step"] == 2 and np.isfinite(ft["train_loss"])
  cfg = json.load(open(tmp_path / "ft" / "config.json"))
  assert cfg["data"]["image_size"] == 56 and cfg["total_steps"] == 2
  _, params = train_runner.final_params(tmp_path / "ft")
  assert params["pos_embedding"].shape == (1, 196, 16)
