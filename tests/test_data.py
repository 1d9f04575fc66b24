"""Input pipeline on ``tfds.testing.mock_data``: order, resume, eval padding."""

import os
import subprocess
import sys
import textwrap

import jax
import ml_collections
import numpy as np
import pytest
import tensorflow_datasets as tfds
from jax.sharding import PartitionSpec as P

from softattn import data
from tests import tiny_data

N = 10  # mock examples per split (every split yields the same examples)


@pytest.fixture
def mock():
  with tfds.testing.mock_data(num_examples=N,
                              policy=tfds.testing.MockPolicy.USE_CODE):
    yield


def _config(name="cifar10", **kw):
  c = dict(name=name, data_dir=None, train_split="train", eval_split="test",
           pp_train="value_range(-1, 1)", pp_eval="value_range(-1, 1)",
           shuffle_buffer=100, cache=False)
  c.update(kw)
  return ml_collections.ConfigDict(c)


def _batches(config, n, *, batch=4, seed=3, start=0):
  ds = data.train_dataset(config, local_batch_size=batch, seed=seed,
                          start_step=start)
  return [b for _, b in zip(range(n), ds.as_numpy_iterator())]


def _keys(images):
  return [im.tobytes() for im in images]


def test_dataset_info(mock):
  info = data.dataset_info(_config(pp_eval="resize(16)|value_range(-1, 1)"))
  assert info == dict(num_classes=10, image_shape=(16, 16, 3), num_train=N,
                      num_eval=N)
  assert data.dataset_info(_config("cifar100"))["num_classes"] == 100
  # imagenet2012 mock images have random sizes: pp_eval fixes the shape.
  info = data.dataset_info(_config(
      "imagenet2012", train_split="train", eval_split="validation",
      pp_eval="resize_small(20)|central_crop(16)|to_rgb|value_range(-1, 1)"))
  assert info["num_classes"] == 1000 and info["image_shape"] == (16, 16, 3)
  with pytest.raises(ValueError, match="fixed size"):
    data.dataset_info(_config("imagenet2012", pp_eval="value_range(-1, 1)"))


@pytest.mark.parametrize("cache", [False, True])  # streamed / in memory
@pytest.mark.parametrize("batch", [4, 12])  # a batch of 12 spans 3 epochs
def test_epochs_are_permutations_that_differ(mock, cache, batch):
  config = _config(cache=cache)
  everything = _keys(next(data.eval_dataset(
      config, "test", local_batch_size=N).as_numpy_iterator())["image"])
  steps = -(-3 * N // batch)  # enough batches for 3 epochs
  stream = np.concatenate([b["image"] for b in _batches(config, steps,
                                                         batch=batch)])
  epochs = [_keys(stream[k * N:(k + 1) * N]) for k in range(3)]
  for epoch in epochs:
    assert sorted(epoch) == sorted(everything)
  assert epochs[0] != epochs[1] != epochs[2]  # reshuffled each epoch
  other_seed = _batches(config, steps, batch=batch, seed=4)
  assert _keys(np.concatenate([b["image"] for b in other_seed])) != _keys(stream)
  # Resume at step 2 (mid-epoch for both batch sizes).
  resumed = np.concatenate([b["image"] for b in _batches(
      config, 1, batch=batch, start=2)])
  np.testing.assert_array_equal(resumed, stream[2 * batch:3 * batch])


@pytest.mark.parametrize("cache", [False, True])
def test_resume_yields_the_same_batches(mock, cache):
  # Random augmentation included: its seeds follow the stream position.
  # 10 examples in batches of 4: step 2 starts mid-epoch, step 5 at an epoch
  # boundary.
  config = _config(cache=cache,
                   pp_train="inception_crop(16)|flip_lr|trivial_augment|"
                            "value_range(-1, 1)|random_erasing(0.5)")
  full = _batches(config, 8)
  for start in (2, 5):
    resumed = _batches(config, 3, start=start)
    for a, b in zip(full[start:], resumed):
      np.testing.assert_array_equal(a["image"], b["image"])
      np.testing.assert_array_equal(a["label"], b["label"])


def test_batched_tail_ops_match_per_example_ops(mock):
  # value_range/to_rgb run once per batch in training; same result as per
  # example (eval runs them per example). No shuffle: same order as eval.
  spec = "to_rgb|value_range(-1, 1)"
  config = _config("fashion_mnist", pp_train=spec, pp_eval=spec,
                   shuffle_buffer=1)
  train = _batches(config, 1, batch=N)[0]
  evals = next(data.eval_dataset(config, "test", local_batch_size=N)
               .as_numpy_iterator())
  assert train["image"].shape == (N, 28, 28, 3)
  np.testing.assert_array_equal(train["image"], evals["image"])
  np.testing.assert_array_equal(train["label"], evals["label"])


def test_train_iter_gives_global_sharded_arrays(mock):
  mesh = jax.sharding.Mesh(np.asarray(jax.devices()), ("data",))
  it = data.make_train_iter(_config(), global_batch_size=4, seed=0,
                            start_step=0, mesh=mesh)
  batch = next(it)
  assert batch["image"].shape == (4, 32, 32, 3)
  assert batch["image"].dtype == np.float32 and batch["label"].dtype == np.int32
  assert batch["image"].sharding.spec == P("data")
  assert -1.0 <= float(batch["image"].min()) and float(batch["image"].max()) <= 1.0


def test_eval_pads_the_last_batch_with_a_mask(mock):
  config = _config()
  everything = next(data.eval_dataset(config, "test", local_batch_size=N)
                    .as_numpy_iterator())
  batches = list(data.make_eval_iter(config, "test", global_batch_size=4))
  assert [b["image"].shape[0] for b in batches] == [4, 4, 4]
  mask = np.concatenate([np.asarray(b["mask"]) for b in batches])
  np.testing.assert_array_equal(mask, [True] * N + [False] * 2)
  images = np.concatenate([np.asarray(b["image"]) for b in batches])
  np.testing.assert_array_equal(images[:N], everything["image"])  # in order
  np.testing.assert_array_equal(images[N:], 0.0)


def test_config_errors_are_one_line(mock):
  with pytest.raises(ValueError, match="multiple of 4"):
    data.make_train_iter(_config(), global_batch_size=6, seed=0, mesh=_mesh4())
  with pytest.raises(ValueError, match="unknown preprocessing op 'flipp'"):
    data.train_dataset(_config(pp_train="flipp"), local_batch_size=2, seed=0)


def _mesh4():
  # A mesh whose data axis has 4 entries needs 4 devices; a fake one suffices
  # for the divisibility check, which runs before any device is touched.
  class FakeMesh:
    axis_names = ("data", "model")
    shape = {"data": 4, "model": 1}
  return FakeMesh()


def test_missing_dataset_names_the_fix(tmp_path):
  with pytest.raises(data.DatasetNotFoundError, match="prepare fashion_mnist"):
    data.dataset_info(_config("fashion_mnist", data_dir=str(tmp_path)))
  with pytest.raises(data.DatasetNotFoundError,
                     match="prepare imagenet21k --source="):
    data.dataset_info(_config("imagenet21k", data_dir=str(tmp_path)))


# Runs in a fresh process (8 fake devices must be set before jax starts); it
# leaves through os._exit because a live tf.data generator can hang the normal
# interpreter shutdown after a failure.
_MESH_SCRIPT = textwrap.dedent("""
    import os, sys, traceback
    import jax, numpy as np, ml_collections, tensorflow_datasets as tfds
    from jax.sharding import Mesh, PartitionSpec as P
    from softattn import data
    assert jax.device_count() == 8, jax.devices()
    c = ml_collections.ConfigDict(dict(
        name="cifar10", train_split="train", eval_split="test",
        pp_train="flip_lr|value_range(-1, 1)", pp_eval="value_range(-1, 1)",
        shuffle_buffer=100))
    mesh = Mesh(np.asarray(jax.devices()).reshape(4, 2), ("data", "model"))
    one = Mesh(np.asarray(jax.devices()[:1]), ("data",))
    def check():
      big = data.make_train_iter(c, global_batch_size=8, seed=1, mesh=mesh)
      small = data.make_train_iter(c, global_batch_size=8, seed=1, mesh=one)
      for _ in range(3):
        a, b = next(big), next(small)
        assert a["image"].sharding.spec == P("data")
        assert a["image"].sharding.mesh.shape == {"data": 4, "model": 2}
        shards = {s.index[0].start for s in a["image"].addressable_shards}
        assert len(a["image"].addressable_shards) == 8 and len(shards) == 4
        np.testing.assert_array_equal(np.asarray(a["image"]),
                                      np.asarray(b["image"]))
      ev = list(data.make_eval_iter(c, "test", global_batch_size=8, mesh=mesh))
      assert sum(int(np.asarray(e["mask"]).sum()) for e in ev) == 10
    try:
      with tfds.testing.mock_data(num_examples=10,
                                  policy=tfds.testing.MockPolicy.USE_CODE):
        check()
      print("ok", flush=True)
      os._exit(0)
    except BaseException:
      traceback.print_exc()
      sys.stderr.flush()
      os._exit(1)
""")


@pytest.mark.slow  # a subprocess with 8 fake devices
def test_batches_on_a_4x2_mesh_match_one_device():
  env = dict(os.environ, XLA_FLAGS=tiny_data.xla_flags(devices=8),
             JAX_PLATFORMS="cpu")
  out = subprocess.run([sys.executable, "-c", _MESH_SCRIPT], env=env,
                       capture_output=True, text=True, timeout=180)
  assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]
