"""big_vision .npz round trip: layout, scan, old posemb, resampling, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from softattn.models.vit import ViT
from softattn.models.big_vision_io import (flatten, load_big_vision_npz,
                                           save_big_vision_npz)

X = jnp.asarray(np.random.RandomState(0).randn(2, 16, 16, 3), jnp.float32)
KW = dict(variant="mu/4", depth=2, num_classes=7, pool="tok", rep_size=8,
          head_zeroinit=False)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
  m = ViT(**KW)
  params = m.init(jax.random.key(3), X)["params"]
  path = tmp_path_factory.mktemp("bv") / "vit.npz"
  save_big_vision_npz(path, params)
  return m, params, path


def test_file_uses_big_vision_names(saved):
  _, _, path = saved
  keys = set(np.load(path).files)
  assert {"embedding/kernel", "pos_embedding", "cls", "pre_logits/kernel",
          "head/bias", "Transformer/encoder_norm/scale",
          "Transformer/encoderblock_1/MultiHeadDotProductAttention_0/query/"
          "kernel", "Transformer/encoderblock_0/MlpBlock_0/Dense_1/bias",
          } <= keys


def test_round_trip_and_scan_layout(saved):
  m, params, path = saved
  loaded = load_big_vision_npz(path, m)
  for k, v in flatten(params).items():
    np.testing.assert_array_equal(flatten(loaded)[k], v)
  y = m.apply({"params": params}, X)
  scan = ViT(scan=True, **KW)
  ps = load_big_vision_npz(path, scan)
  assert ps["Transformer"]["encoderblock"]["LayerNorm_0"]["scale"].shape[0] == 2
  np.testing.assert_allclose(scan.apply({"params": ps}, X), y, rtol=1e-5,
                             atol=1e-5)


def test_old_combined_posemb_and_posemb_with_cls(saved, tmp_path):
  m, params, path = saved
  y = m.apply({"params": params}, X)
  # Our original-ViT layout model gets a zero cls row: same function.
  mc = ViT(posemb_with_cls=True, **KW)
  pc = load_big_vision_npz(path, mc)
  assert pc["pos_embedding"].shape == (1, 17, 32)
  np.testing.assert_allclose(mc.apply({"params": pc}, X), y, rtol=1e-5,
                             atol=1e-5)
  # An old checkpoint (cls + posemb combined, posemb inside Transformer)
  # loads into big_vision's layout by folding row 0 into cls.
  pc = jax.tree.map(np.array, pc)
  pc["pos_embedding"][:, 0] = 0.5
  old = tmp_path / "old.npz"
  flat = {k: v for k, v in flatten(pc).items()}
  flat["Transformer/pos_embedding"] = flat.pop("pos_embedding")
  flat["pre_logits/kernel"] = flat.pop("pre_logits_dense/kernel")
  flat["pre_logits/bias"] = flat.pop("pre_logits_dense/bias")
  np.savez(old, **flat)
  p = load_big_vision_npz(old, m)
  np.testing.assert_allclose(p["cls"], params["cls"] + 0.5, rtol=1e-6)
  np.testing.assert_allclose(m.apply({"params": p}, X),
                             mc.apply({"params": pc}, X), rtol=1e-5, atol=1e-5)


def test_resample_ours_only_and_errors(saved):
  m, params, path = saved
  # Higher resolution: the 4x4 posemb grid is resampled to 8x8.
  p = load_big_vision_npz(path, m, image_size=32)
  assert p["pos_embedding"].shape == (1, 64, 32)
  assert m.apply({"params": p}, jnp.zeros((1, 32, 32, 3))).shape == (1, 7)
  # softattn-only parameters come from init.
  mq = ViT(normalizer="ssmax", qk_layernorm=True, **KW)
  pq = load_big_vision_npz(path, mq)
  blk = pq["Transformer"]["encoderblock_0"]["MultiHeadDotProductAttention_0"]
  np.testing.assert_allclose(blk["norm_s_scale"], 0.43)
  np.testing.assert_allclose(blk["query_ln"]["scale"], 1.0)
  # A new head needs dont_load.
  m10 = ViT(**{**KW, "num_classes": 10})
  with pytest.raises(ValueError, match="head/kernel"):
    load_big_vision_npz(path, m10)
  p10 = load_big_vision_npz(path, m10, dont_load=("head/.*",))
  assert p10["head"]["kernel"].shape == (8, 10)
  with pytest.raises(ValueError, match="unexpected.*pre_logits"):
    load_big_vision_npz(path, ViT(**{**KW, "rep_size": 0}))
