"""init_from: merging a checkpoint's weights into a fresh model."""

import jax.numpy as jnp
import numpy as np
import pytest

from softattn import init_from


def _fresh():
  return {"body": {"kernel": jnp.zeros((2, 3)), "bias": jnp.zeros(3)},
          "nl": {"kernel": jnp.zeros((3, 3))},
          "head": {"kernel": jnp.zeros((3, 10))}}


def test_merge_loads_shared_keeps_new_and_skipped_fresh():
  ckpt = {"body": {"kernel": np.ones((2, 3), np.float64), "bias": np.ones(3)},
          "head": {"kernel": np.ones((3, 5))}}          # old label set
  merged, report = init_from.merge(_fresh(), ckpt, skip="head/.*")
  np.testing.assert_array_equal(merged["body"]["kernel"], 1.0)
  assert merged["body"]["kernel"].dtype == jnp.float32  # the model's dtype
  np.testing.assert_array_equal(merged["nl"]["kernel"], 0.0)
  np.testing.assert_array_equal(merged["head"]["kernel"], 0.0)
  assert sorted(report["loaded"]) == ["body/bias", "body/kernel"]
  assert report["fresh"] == ["nl/kernel"]
  assert report["skipped"] == ["head/kernel"]


def test_merge_errors_name_the_fix():
  ckpt = {"body": {"kernel": np.ones((2, 3)), "bias": np.ones(3)},
          "head": {"kernel": np.ones((3, 5))}}
  with pytest.raises(init_from.InitFromError,
                     match=r"head/kernel: checkpoint \(3, 5\) vs model \(3, 10\)"
                     r".*init_from.skip"):
    init_from.merge(_fresh(), ckpt)
  ckpt = {"body": {"kernel": np.ones((2, 3))}, "old_block": {"w": np.ones(2)}}
  with pytest.raises(init_from.InitFromError, match="no place for.*old_block/w"):
    init_from.merge(_fresh(), ckpt)
  # Unused checkpoint weights are fine when skip names them.
  _, report = init_from.merge(_fresh(), ckpt, skip="old_block/.*")
  assert report["unused"] == ["old_block/w"]


def test_read_orbax_errors(tmp_path):
  with pytest.raises(init_from.InitFromError, match="does not exist"):
    init_from.read_orbax(str(tmp_path / "nope"))
  (tmp_path / "checkpoints").mkdir()
  with pytest.raises(init_from.InitFromError, match="holds no checkpoint"):
    init_from.read_orbax(str(tmp_path))
