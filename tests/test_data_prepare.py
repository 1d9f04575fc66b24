"""Offline Fashion-MNIST for real (Debian's dataset-fashion-mnist), ~15 s.

Needs ``apt-get install -y dataset-fashion-mnist`` (CI installs it).
"""

import fcntl
import hashlib
import os
import shutil

import jax
import ml_collections
import numpy as np
import pytest
import tensorflow_datasets as tfds

from softattn import data
from softattn.data import __main__ as cli
from softattn.data import pipeline, prepare


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
  """Prepares once per test session, also under pytest-xdist (file lock)."""
  assert os.path.isdir(prepare.DEBIAN_DIR), (
      "install the Fashion-MNIST files: apt-get install -y dataset-fashion-mnist")
  base = tmp_path_factory.getbasetemp()
  if os.environ.get("PYTEST_XDIST_WORKER"):
    base = base.parent  # shared by the workers of this session only
  root = base / "fashion_mnist_tfds"
  with open(base / "fashion_mnist_tfds.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not (base / "fashion_mnist_tfds.done").exists():
      assert cli.main(["prepare", "fashion_mnist", "--data_dir", str(root)]) == 0
      (base / "fashion_mnist_tfds.done").touch()
  return str(root)


def test_prepared_dataset_is_the_real_one(data_dir):
  builder = tfds.builder("fashion_mnist", data_dir=data_dir)
  assert builder.info.splits["train"].num_examples == 60_000
  assert builder.info.splits["test"].num_examples == 10_000
  test = tfds.as_numpy(builder.as_dataset(split="test", batch_size=-1))
  images, labels = test["image"], test["label"]
  assert images.shape == (10_000, 28, 28, 1) and images.dtype == np.uint8
  # The genuine test set has exactly 1000 images of each of the 10 classes.
  np.testing.assert_array_equal(np.bincount(labels), [1000] * 10)
  assert builder.info.features["label"].names[0] == "T-shirt/top"
  # Nothing but the prepared dataset is left behind (downloads were temporary).
  assert os.listdir(data_dir) == ["fashion_mnist"]


def test_restored_headers_match_tfds_checksums():
  builder = tfds.builder("fashion_mnist")
  expected = prepare._registered_checksums(builder)  # pylint: disable=protected-access
  name = "t10k-labels-idx1-ubyte.gz"
  with open(os.path.join(prepare.DEBIAN_DIR, name), "rb") as f:
    debian = f.read()
  assert hashlib.sha256(debian).hexdigest() != expected[name][1]
  restored = prepare.restore_gzip_header(debian, name, 1504176627)
  assert hashlib.sha256(restored).hexdigest() == expected[name][1]
  assert prepare.restore_gzip_header(restored, name, 0) == restored  # idempotent


def test_a_changed_file_is_refused(tmp_path, capsys):
  source = tmp_path / "source"
  shutil.copytree(prepare.DEBIAN_DIR, source)
  label_file = source / "t10k-labels-idx1-ubyte.gz"
  raw = bytearray(label_file.read_bytes())
  raw[-20] ^= 0xFF  # one flipped byte of compressed payload
  label_file.write_bytes(bytes(raw))
  args = ["prepare", "fashion_mnist", "--data_dir", str(tmp_path / "out"),
          "--source_dir", str(source)]
  assert cli.main(args) == 1
  assert "not the genuine Fashion-MNIST" in capsys.readouterr().err
  os.remove(label_file)
  assert cli.main(args) == 1
  assert "apt-get install" in capsys.readouterr().err


def _config(data_dir, **kw):
  c = dict(name="fashion_mnist", data_dir=data_dir, train_split="train",
           eval_split="test", pp_train="value_range(-1, 1)",
           pp_eval="to_rgb|value_range(-1, 1)", shuffle_buffer=1000, cache=False)
  c.update(kw)
  return ml_collections.ConfigDict(c)


def test_dataset_info_and_train_batches(data_dir):
  config = _config(data_dir)
  assert data.dataset_info(config) == dict(
      num_classes=10, image_shape=(28, 28, 3), num_train=60_000,
      num_eval=10_000)
  for cache in (False, True):  # streamed from disk / decoded into memory
    config.cache = cache
    batch = next(data.make_train_iter(config, global_batch_size=8, seed=0))
    assert batch["image"].shape == (8, 28, 28, 1)
    assert float(batch["image"].min()) == -1.0
    assert 0 <= int(batch["label"].min()) and int(batch["label"].max()) < 10


def test_processes_read_disjoint_slices(data_dir, monkeypatch):
  """Two simulated hosts: each reads its half; eval pads both to one length."""
  config = _config(data_dir, eval_split="test[:1001]",
                   train_split="test[:1001]", shuffle_buffer=2000)
  whole = np.concatenate([b["image"] for b in data.eval_dataset(
      config, "test[:1001]", local_batch_size=1001).as_numpy_iterator()])
  counts = {0: 501, 1: 500}  # tfds.even_splits of 1001 examples
  monkeypatch.setattr(jax, "process_count", lambda: 2)
  monkeypatch.setattr(pipeline.multihost_utils, "process_allgather",
                      lambda n: np.asarray(list(counts.values())))
  seen = []
  for index in (0, 1):
    monkeypatch.setattr(jax, "process_index", lambda index=index: index)
    batches = list(data.eval_dataset(config, "test[:1001]",
                                     local_batch_size=64).as_numpy_iterator())
    assert len(batches) == 8  # ceil(501 / 64) on both processes
    mask = np.concatenate([b["mask"] for b in batches])
    assert mask.sum() == counts[index] and mask[:counts[index]].all()
    seen.append(np.concatenate([b["image"] for b in batches])[mask])
    # Training reads the same slice: one epoch is a permutation of it.
    train = np.concatenate([b["image"] for b in data.train_dataset(
        config, local_batch_size=counts[index], seed=0).take(1)
        .as_numpy_iterator()])
    assert sorted(x.tobytes() for x in train) == sorted(
        x.tobytes() for x in seen[-1][..., :1])
  np.testing.assert_array_equal(np.concatenate(seen), whole)
