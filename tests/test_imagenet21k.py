"""ImageNet-21k preparation on a generated miniature, end to end.

Four synsets (two of them ImageNet-1k classes) with a handful of small JPEGs,
one CMYK JPEG, one PNG named ``.JPEG``, one grayscale JPEG and one truncated
(undecodable) file, in each of the three source forms (the release tar
also gzipped, as winter21 ships).
"""

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile

import jax
import ml_collections
import numpy as np
import pytest
import tensorflow_datasets as tfds
from PIL import Image

from softattn import evaluate
from softattn.data import __main__ as cli
from softattn.data import hashed_shards, i1k_in_i21k, imagenet21k, pipeline
from softattn.data import imagenet21k_source as source_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WNIDS = ["n00004475", "n01440764", "n01443537", "n09999999"]
NUM_SHARDS = 3


def _jpeg(rng, mode="RGB", fmt="JPEG", size=(40, 30)):
  # Smooth colours, as in photos (JPEG's chroma subsampling ruins noise).
  pixels = rng.integers(0, 256, (3, 4, 3), np.uint8)
  image = Image.fromarray(pixels).resize(size, Image.BILINEAR).convert(mode)
  out = io.BytesIO()
  image.save(out, fmt, quality=90)
  return out.getvalue()


def miniature_files():
  """``{wnid: {file name: bytes}}``: 20 files, 3 of them special, 1 bad."""
  rng = np.random.default_rng(0)
  files = {w: {f"{w}_{i}.JPEG": _jpeg(rng, size=(30 + 7 * i, 40 - 3 * i))
               for i in range(4)} for w in WNIDS}
  files["n01440764"]["n01440764_cmyk.JPEG"] = _jpeg(rng, "CMYK")
  files["n01443537"]["n01443537_png.JPEG"] = _jpeg(rng, fmt="PNG")
  files["n09999999"]["n09999999_gray.JPEG"] = _jpeg(rng, "L")
  good = _jpeg(rng)
  files["n00004475"]["n00004475_bad.JPEG"] = good[:len(good) // 2]
  return files


def _tar_bytes(members: dict) -> bytes:
  out = io.BytesIO()
  with tarfile.open(fileobj=out, mode="w") as t:
    for name, data in sorted(members.items()):
      info = tarfile.TarInfo(name)
      info.size = len(data)
      t.addfile(info, io.BytesIO(data))
  return out.getvalue()


def write_forms(root, files) -> dict:
  """The miniature as release tar (plain and gzipped), folder of tars and
  folder of folders."""
  forms = {"folders": root / "folders", "tars": root / "tars",
           "release": root / "fall11_whole.tar",
           "gzipped": root / "winter21_whole.tar.gz"}
  forms["tars"].mkdir()
  synset_tars = {}
  for wnid, images in files.items():
    (forms["folders"] / wnid).mkdir(parents=True)
    for name, data in images.items():
      (forms["folders"] / wnid / name).write_bytes(data)
    synset_tars[f"{wnid}.tar"] = _tar_bytes(images)
    (forms["tars"] / f"{wnid}.tar").write_bytes(synset_tars[f"{wnid}.tar"])
  (forms["folders"] / "README.txt").write_text("not a synset")
  release = _tar_bytes(synset_tars)
  forms["release"].write_bytes(release)
  forms["gzipped"].write_bytes(gzip.compress(release))
  return {k: str(v) for k, v in forms.items()}


def _shards(data_dir):
  version = os.path.join(data_dir, "imagenet21k", "1.0.0")
  return {n: open(os.path.join(version, n), "rb").read()
          for n in sorted(os.listdir(version)) if ".tfrecord-" in n}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  """The miniature in four forms, and each one built (two of them with 2
  worker processes); returns ``(files, forms, {form: (data_dir, report)})``."""
  root = tmp_path_factory.mktemp("i21k")
  files = miniature_files()
  forms = write_forms(root, files)
  out = {}
  for form, processes in (("folders", 1), ("tars", 1), ("release", 2),
                          ("gzipped", 2)):
    data_dir = str(root / f"tfds_{form}")
    report = imagenet21k.prepare(forms[form], data_dir, processes=processes,
                                 num_shards=NUM_SHARDS, task_bytes=1500,
                                 log=lambda _: None)
    out[form] = (data_dir, report)
  return files, forms, out


def test_three_forms_build_the_same_dataset(built):
  files, _, out = built
  shards = {form: _shards(d) for form, (d, _) in out.items()}
  assert len(shards["folders"]) == NUM_SHARDS
  assert shards["folders"] == shards["tars"] == shards["release"] == (
      shards["gzipped"])
  for data_dir, report in out.values():
    assert report.num_classes == 4 and report.num_examples == 19
    assert report.counts == dict(kept=17, cmyk=1, not_jpeg=1, undecodable=1)
    assert report.skipped == ["n00004475/n00004475_bad.JPEG"]
    assert not report.i1k_table_applies
    # Nothing but the dataset is left: the build folder is gone.
    assert os.listdir(data_dir) == ["imagenet21k"]

  builder = tfds.builder("imagenet21k", data_dir=out["release"][0])
  assert builder.info.splits["full"].num_examples == 19
  assert builder.info.features["label"].names == WNIDS
  ds = builder.as_dataset(split="full", decoders={
      "image": tfds.decode.SkipDecoding()})
  records = list(tfds.as_numpy(ds))
  names = [r["file_name"].decode() for r in records]
  # Stored in md5(file_name) order: a fixed, random-looking order.
  assert names == sorted(names, key=hashed_shards.key_hash)
  assert names != sorted(names)
  for r, name in zip(records, names):
    wnid, file = name.split("/")
    assert r["label"] == WNIDS.index(wnid)
    image = Image.open(io.BytesIO(r["image"]))
    assert image.format == "JPEG" and image.mode in ("RGB", "L")
    if file.endswith(("cmyk.JPEG", "png.JPEG")):  # re-encoded as RGB JPEG
      assert image.mode == "RGB" and r["image"] != files[wnid][file]
      original = np.asarray(Image.open(io.BytesIO(files[wnid][file]))
                            .convert("RGB"), np.float32)
      assert np.abs(np.asarray(image, np.float32) - original).mean() < 20
    else:  # kept byte for byte
      assert r["image"] == files[wnid][file]


def test_labels_file_and_the_i1k_table(built, capsys):
  data_dir, report = built[2]["folders"]
  labels = (evaluate.read_wnids(os.path.join(report.version_dir,
                                             "label.labels.txt")))
  assert labels == WNIDS
  for line in imagenet21k.summary(report):
    print(line)
  assert "i21k_wnids_file=" + os.path.join(
      report.version_dir, "label.labels.txt") in capsys.readouterr().out
  del data_dir
  # A fall11-sized label list: the shipped table must match it entry by entry.
  i1k = evaluate.i1k_wnids()
  fall11 = [None] * i1k_in_i21k.I21K_NUM_CLASSES
  for wnid, index in zip(i1k, i1k_in_i21k.INDICES):
    if index != i1k_in_i21k.MISSING:
      fall11[index] = wnid
  # Fillers sort between their i1k neighbours ("n0...a" < "n0...a_1" < next).
  last = "n00000000"
  for i, w in enumerate(fall11):
    if w is None:
      fall11[i] = f"{last}_{i:05d}"
    else:
      last = w
  assert fall11 == sorted(fall11)
  assert imagenet21k.i1k_table_applies(fall11)
  # fall11_whole.tar has 21,841 synsets: the two image-less ones of the
  # 21,843-label space are added back when the i1k table then agrees.
  imageless = (fall11[5], fall11[10_000])
  source = [w for w in fall11 if w not in imageless]
  assert imagenet21k.label_space(source, imageless) == fall11
  wrong = (fall11[5], "n99999998")  # would shift every i1k label after 10,000
  assert imagenet21k.label_space(source, wrong) == source
  assert imagenet21k.label_space(WNIDS) == WNIDS
  shifted = fall11[1:] + ["n99999999"]  # every i1k class one label earlier
  with pytest.raises(imagenet21k.ImageNet21kPrepareError, match="not the fall11"):
    imagenet21k.i1k_table_applies(shifted)


def _i21k_data_config(data_dir, **kw):
  from tests import train_runner  # pylint: disable=g-import-not-at-top
  config = train_runner.load_config("configs/i21k_vit.py")
  data = ml_collections.ConfigDict(config.data.to_dict())
  data.data_dir = data_dir
  data.train_split, data.eval_split = "full[4:]", "full[:4]"  # held out
  data.shuffle_buffer = 16
  data.update(kw)
  return config, data


def test_the_training_pipeline_reads_it(built):
  data_dir = built[2]["tars"][0]
  _, data = _i21k_data_config(data_dir)
  assert data.pp_train.startswith("inception_crop(224)|flip_lr")
  assert pipeline.dataset_info(data) == dict(
      num_classes=4, image_shape=(224, 224, 3), num_train=15, num_eval=4)
  batch = next(pipeline.train_dataset(data, local_batch_size=15, seed=0)
               .as_numpy_iterator())
  assert batch["image"].shape == (15, 224, 224, 3)
  assert batch["image"].dtype == np.float32 and batch["label"].dtype == np.int32
  assert -1.0 <= batch["image"].min() < batch["image"].max() <= 1.0
  builder = tfds.builder("imagenet21k", data_dir=data_dir)
  train_labels = [int(r["label"]) for r in tfds.as_numpy(builder.as_dataset(
      split="full[4:]", decoders={"image": tfds.decode.SkipDecoding()}))]
  assert sorted(batch["label"].tolist()) == sorted(train_labels)
  evals = list(pipeline.eval_dataset(data, "full[:4]", local_batch_size=4)
               .as_numpy_iterator())
  assert len(evals) == 1 and evals[0]["mask"].all()
  # What the train loop gets: global jax.Arrays, the same first batch.
  global_batch = next(pipeline.make_train_iter(data, global_batch_size=15,
                                               seed=0))
  assert isinstance(global_batch["image"], jax.Array)
  np.testing.assert_array_equal(np.asarray(global_batch["label"]),
                                batch["label"])


@pytest.mark.slow
def test_a_tiny_training_run(built, tmp_path):
  """train_and_evaluate on the prepared miniature (the i21k config's runlocal
  model; images cropped to 32 pixels to keep it small)."""
  from softattn import train  # pylint: disable=g-import-not-at-top
  from tests import train_runner  # pylint: disable=g-import-not-at-top
  config = train_runner.load_config("configs/i21k_vit.py:runlocal")
  _, data = _i21k_data_config(
      built[2]["folders"][0], pp_train="inception_crop(32)|flip_lr|"
      "value_range(-1, 1)", pp_eval="resize_small(36)|central_crop(32)|"
      "value_range(-1, 1)")
  with config.unlocked():
    config.data = data
    config.checkpoint_async = False
    config.verbose = False
  final = train.train_and_evaluate(config, str(tmp_path))
  assert np.isfinite(final["train_loss"]) and np.isfinite(final["eval_loss"])
  status = json.load(open(tmp_path / "status.json", encoding="utf-8"))
  assert status["state"] == "done"


_KILL = """
import os, signal, sys
from softattn.data import imagenet21k
kills_after, mark = int(sys.argv[3]), imagenet21k._mark
def mark_then_die(path, result):
  mark(path, result)
  if len([p for p in path.parent.iterdir() if p.name.endswith('.json')
          and p.name != 'plan.json']) >= kills_after:
    os.kill(os.getpid(), signal.SIGKILL)
imagenet21k._mark = mark_then_die
imagenet21k.prepare(sys.argv[1], sys.argv[2], processes=1, num_shards=3,
                    task_bytes=1500, log=lambda _: None)
"""


def test_an_interrupted_build_resumes(built, tmp_path):
  """Killed twice (SIGKILL after the 2nd marker, then after 2 shards), on the
  gzipped release (its stream passes over finished tasks); the third run
  ends with the shards of an uninterrupted build."""
  files, forms, out = built
  data_dir = str(tmp_path / "tfds")
  env = dict(os.environ, PYTHONPATH=REPO)
  build = tmp_path / "tfds" / "imagenet21k.build"

  def killed_run(kills_after):
    proc = subprocess.run([sys.executable, "-c", _KILL, forms["gzipped"],
                           data_dir, str(kills_after)], env=env, check=False,
                          capture_output=True, timeout=300)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    return json.loads((build / "plan.json").read_text())

  tasks = len(killed_run(2)["tasks"])  # during the encode tasks
  assert tasks > 2 and not os.path.exists(
      os.path.join(data_dir, "imagenet21k", "1.0.0", "dataset_info.json"))
  killed_run(tasks + 2)  # the rest of the tasks, then 2 of the 3 shards
  report = imagenet21k.prepare(forms["gzipped"], data_dir, processes=1,
                               num_shards=3, task_bytes=1500,
                               log=lambda _: None)
  assert (report.resumed_tasks, report.resumed_shards) == (tasks, 2)
  assert report.counts == out["folders"][1].counts
  assert _shards(data_dir) == _shards(out["folders"][0])
  assert len(files) == 4


def test_the_command(built, tmp_path, capsys):
  forms = built[1]
  args = ["prepare", "imagenet21k", "--source", forms["tars"], "--data_dir",
          str(tmp_path / "tfds"), "--processes", "1", "--build_dir",
          str(tmp_path / "scratch")]
  assert cli.main(args) == 0
  out = capsys.readouterr().out
  assert "19 images, 4 classes" in out
  assert ("1 CMYK, 1 not JPEG; skipped 1 undecodable: "
          "n00004475/n00004475_bad.JPEG") in out
  assert not (tmp_path / "scratch").exists()
  assert tfds.builder("imagenet21k", data_dir=str(tmp_path / "tfds")).info \
      .splits["full"].num_shards == 1  # ~512 MiB per shard by default
  assert cli.main(args) == 1
  assert "already prepared" in capsys.readouterr().err


def test_labels_without_images(built, tmp_path, monkeypatch, capsys):
  """An image-less label (as fall11's two) is in the label space, empty."""
  monkeypatch.setattr(imagenet21k, "label_space",
                      lambda wnids: sorted([*wnids, "n01440000"]))
  assert cli.main(["prepare", "imagenet21k", "--source", built[1]["folders"],
                   "--data_dir", str(tmp_path), "--processes", "1"]) == 0
  assert ("the source's 4 synsets and n01440000, which have no images"
          in capsys.readouterr().out)
  builder = tfds.builder("imagenet21k", data_dir=str(tmp_path))
  names = builder.info.features["label"].names
  assert names == sorted(WNIDS + ["n01440000"])
  assert "n01440000 (no images" in builder.info.description
  labels = [names[int(r["label"])] for r in tfds.as_numpy(builder.as_dataset(
      split="full", decoders={"image": tfds.decode.SkipDecoding()}))]
  assert sorted(set(labels)) == WNIDS and len(labels) == 19


def test_bad_sources_get_one_line(tmp_path, capsys):
  assert cli.main(["prepare", "imagenet21k", "--data_dir", str(tmp_path),
                   "--source", str(tmp_path / "nothing")]) == 1
  assert "does not exist" in capsys.readouterr().err
  (tmp_path / "winter21_whole.tar.gz").write_bytes(b"\x1f\x8b")
  assert cli.main(["prepare", "imagenet21k", "--data_dir", str(tmp_path),
                   "--source", str(tmp_path / "winter21_whole.tar.gz")]) == 1
  assert "cannot read" in capsys.readouterr().err
  (tmp_path / "empty").mkdir()
  assert cli.main(["prepare", "imagenet21k", "--data_dir", str(tmp_path),
                   "--source", str(tmp_path / "empty")]) == 1
  assert "holds no synsets" in capsys.readouterr().err
  assert cli.main(["prepare", "imagenet21k"]) == 2
  assert "needs --source" in capsys.readouterr().err
  (tmp_path / "tars").mkdir()
  (tmp_path / "tars" / "n00000001.tar").write_bytes(b"x" * 700)  # damaged
  assert cli.main(["prepare", "imagenet21k", "--data_dir", str(tmp_path),
                   "--source", str(tmp_path / "tars"), "--processes", "1"]) == 1
  err = capsys.readouterr().err
  assert "cannot read synset n00000001" in err and len(err.splitlines()) == 1


def test_clean_image_decides_by_content():
  rng = np.random.default_rng(1)
  good = _jpeg(rng)
  assert source_lib.clean_image(good) == (good, "kept")
  assert source_lib.clean_image(b"not an image")[1] == "undecodable"
  assert source_lib.clean_image(good[:100])[1] == "undecodable"
  data, what = source_lib.clean_image(_jpeg(rng, fmt="PNG"))
  assert what == "not_jpeg" and data[:2] == b"\xff\xd8"
