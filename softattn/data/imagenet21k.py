"""``python -m softattn.data prepare imagenet21k --source=...``: the TFDS dataset.

Builds ``<data_dir>/imagenet21k/1.0.0/``, which ``configs/i21k_vit.py`` reads
through ``tfds.builder("imagenet21k", data_dir=...)`` like any prepared TFDS
dataset: features ``image`` (JPEG), ``label`` (``ClassLabel`` over the sorted
WordNet ids of the source: 19,167 for winter21; for fall11 its 21,841 plus
the 2 image-less ones of big_vision's 21,843, see ``label_space``) and
``file_name`` (``<wnid>/<file>``), one split ``full``.

Why not TFDS's own writer: it runs in one process (its parallel path is Apache
Beam) and restarts from nothing when interrupted; 14M images need both
processes and resume. So the writing is split as TFDS's writer does it, with
files per unit of work (``softattn.data.hashed_shards``):

1. **encode**, one task per group of synsets (about ``task_bytes`` of
   source): read, check and re-encode each image (``imagenet21k_source``),
   give it the hash ``md5(<wnid>/<file>)``, and write the task's records to
   one file sorted by hash, with the offset where each output shard's hash
   range starts;
2. **shard** ``j`` of ``n`` gathers hash range ``j`` from every task file,
   sorts it, serialises it with the TFDS features and writes it with TFDS's
   TFRecord file adapter as ``imagenet21k-full.tfrecord-0000j-of-0000n``;
3. TFDS's ``folder_dataset.write_metadata`` writes ``dataset_info.json``,
   the features and the split.

Tasks and shards run in a pool of processes. Each finished one leaves a
marker in ``<data_dir>/imagenet21k.build/`` (written by the parent after the
worker's file is complete), so rerunning the same command after an
interruption redoes only unmarked work; the build folder goes once the
dataset is written. The records are stored in hash order, which is a fixed
pseudo-random order: the output is the same byte for byte whatever the number
of processes, interruptions or source form, and ``full[:51200]``, the
held-out split of ``configs/i21k_vit.py`` (big_vision's), is a fixed random
sample of 51,200 images.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tarfile
from typing import Callable, Iterable

from etils import epath

from softattn.data import hashed_shards
from softattn.data import i1k_in_i21k
from softattn.data import imagenet21k_source as source_lib

NAME = "imagenet21k"
VERSION = "1.0.0"
SPLIT = "full"
FALL11_CLASSES = i1k_in_i21k.I21K_NUM_CLASSES  # 21,843 synsets
# winter21_whole.tar: 19,167 synsets (2,674 fewer than fall11), per the
# ImageNet release note of 2021 as quoted by timm's imagenet-w21 dataset card.
WINTER21_CLASSES = 19_167
# fall11_whole.tar has 21,841 synsets; big_vision's 21,843 labels add these
# two, which have no images (google-research/big_transfer issue 18, where a
# user names them; label_space adds them only if the i1k table then agrees).
FALL11_IMAGELESS = ("n03931044", "n09859684")
SHARD_BYTES = 512 << 20   # target output shard size (TFDS keeps < 1 GiB)
TASK_BYTES = 512 << 20    # source bytes per encode task (held in memory)
# Default worker count cap: each worker holds ~1 GiB (a task or a shard, and
# TensorFlow), and past a few dozen processes the disks, not the CPUs, limit.
MAX_DEFAULT_PROCESSES = 32
_COUNTS = ("kept", "cmyk", "not_jpeg", "undecodable")


class ImageNet21kPrepareError(RuntimeError):
  """The dataset cannot be built as asked (message names the fix)."""


def features(wnids):
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  return tfds.features.FeaturesDict({
      "image": tfds.features.Image(shape=(None, None, 3),
                                   encoding_format="jpeg"),
      "label": tfds.features.ClassLabel(names=list(wnids)),
      "file_name": tfds.features.Text(),
  })


def _i1k_mismatch(wnids: list[str]) -> str | None:
  """Why ``softattn.data.i1k_in_i21k`` does not index ``wnids`` (None: it does)."""
  from softattn import evaluate  # pylint: disable=g-import-not-at-top
  position = {w: i for i, w in enumerate(wnids)}
  for i1k, index in zip(evaluate.i1k_wnids(), i1k_in_i21k.INDICES):
    if position.get(i1k, i1k_in_i21k.MISSING) != index:
      return (f"i1k class {i1k} is at label {position.get(i1k)} where "
              f"softattn.data.i1k_in_i21k has {index}")
  return None


def label_space(wnids: list[str],
                imageless: tuple[str, ...] = FALL11_IMAGELESS) -> list[str]:
  """The labels for a source whose sorted synsets are ``wnids``.

  ``fall11_whole.tar`` holds 21,841 synsets; the 21,843-label space of
  big_vision and the public checkpoints adds two that have no images
  (``imageless``). A source of 21,841 synsets without them gets them added
  when that puts every i1k class at its label in
  ``softattn.data.i1k_in_i21k``; every other source keeps its own list.
  """
  if (len(wnids) == FALL11_CLASSES - len(imageless)
      and not set(imageless) & set(wnids)):
    padded = sorted([*wnids, *imageless])
    if _i1k_mismatch(padded) is None:
      return padded
  return list(wnids)


def i1k_table_applies(wnids: list[str]) -> bool:
  """Whether ``softattn.data.i1k_in_i21k`` indexes these labels.

  The shipped table is for the sorted fall11 wnids: with 21,843 labels it
  must match entry for entry (else ImageNet21kPrepareError); with any
  other count (winter21) it does not apply and the run needs
  ``config.eval.i21k_wnids_file`` (the dataset's ``label.labels.txt``).
  """
  if len(wnids) != FALL11_CLASSES:
    return False
  mismatch = _i1k_mismatch(wnids)
  if mismatch:
    raise ImageNet21kPrepareError(
        f"{len(wnids)} synsets like fall11, but {mismatch}: this is not the "
        "fall11 synset list")
  return True


# ---------------------------------------------------------------- the plan


@dataclasses.dataclass
class Plan:
  source: str
  wnids: list[str]
  tasks: list[list[source_lib.Synset]]
  num_shards: int

  def to_json(self) -> dict:
    return dict(source=self.source, wnids=self.wnids, num_shards=self.num_shards,
                tasks=[[dataclasses.asdict(s) for s in t] for t in self.tasks])


def make_plan(source: str, num_shards: int | None = None,
              task_bytes: int = TASK_BYTES) -> Plan:
  """Lists the source's synsets and groups them into tasks of ~task_bytes."""
  synsets = source_lib.list_synsets(source)
  tasks, current, size = [], [], 0
  # Tasks follow the order the source is read in (a release tar's archive
  # order; the wnid order of folders), so a gzipped release streams through.
  for s in sorted(synsets, key=lambda s: s.offset):
    if current and size + s.size > task_bytes:
      tasks.append(current)
      current, size = [], 0
    current.append(s)
    size += s.size
  tasks.append(current)
  total = sum(s.size for s in synsets)
  if num_shards is None:
    num_shards = max(1, math.ceil(total / SHARD_BYTES))
  return Plan(os.path.abspath(source), label_space([s.wnid for s in synsets]),
              tasks, num_shards)


# ------------------------------------------------------ work in the workers


def encode_task(synsets: list[source_lib.Synset], labels: list[int],
                num_shards: int, out: str,
                tars: list[bytes] | None = None) -> dict:
  """Encode task: one file of records sorted by hash; returns its index.

  ``tars``: the synset tars themselves, for synsets of a gzipped release.

  ``offsets[j]`` is where shard ``j``'s records start (``offsets[-1]`` is the
  file size); ``counts`` says what ``clean_image`` did, ``skipped`` names the
  undecodable files.
  """
  records, counts, skipped = [], dict.fromkeys(_COUNTS, 0), []
  for synset, label, tar in zip(synsets, labels, tars or [None] * len(labels)):
    try:
      for name, data in source_lib.iter_images(synset, tar):
        key = f"{synset.wnid}/{name}"
        jpeg, what = source_lib.clean_image(data)
        counts[what] += 1
        if jpeg is None:
          skipped.append(key)
          continue
        records.append((hashed_shards.key_hash(key), key, label, jpeg))
    except (tarfile.TarError, OSError) as e:  # a damaged synset tar / folder
      raise source_lib.SourceError(
          f"cannot read synset {synset.wnid} ({synset.path}): {e}; replace "
          "it from the release and rerun (finished work is kept)") from None
  offsets = hashed_shards.write_sorted(records, num_shards, out)
  return dict(offsets=offsets, counts=counts, skipped=skipped)


# ------------------------------------------------------------ the parent


def _template(version_dir):
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  return tfds.core.naming.ShardedFileTemplate(
      data_dir=version_dir, dataset_name=NAME, split=SPLIT,
      filetype_suffix="tfrecord")


def _mark(path: epath.Path, result: dict) -> None:
  """Written by the parent once a worker's file is complete: the resume marker."""
  path.write_text(json.dumps(result))


@dataclasses.dataclass
class Report:
  num_classes: int
  num_examples: int
  counts: dict[str, int]
  skipped: list[str]
  resumed_tasks: int
  resumed_shards: int
  i1k_table_applies: bool
  version_dir: str
  imageless: list[str] = dataclasses.field(default_factory=list)


def _check_plan(build: epath.Path, plan: Plan) -> None:
  path = build / "plan.json"
  if path.exists():
    if json.loads(path.read_text()) != plan.to_json():
      raise ImageNet21kPrepareError(
          f"{build} holds an interrupted build of another source or shard "
          "count; rerun with the same --source/--num_shards, or delete it")
  else:
    build.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan.to_json()))


def _encode_jobs(build, plan, todo):
  """``(task, encode_task, args)`` for the unfinished tasks, in task order.

  A gzipped release is read once, in this process, and each task's synset
  tars travel to its worker in memory; every other source is read by the
  workers themselves.
  """
  label = {w: i for i, w in enumerate(plan.wnids)}

  def args(i, tars=None):
    return (plan.tasks[i], [label[s.wnid] for s in plan.tasks[i]],
            plan.num_shards, os.fspath(build / f"task-{i:05d}.records"), tars)

  if not any(s.kind == "gzip_release" for s in plan.tasks[0]):
    yield from ((i, encode_task, args(i)) for i in todo)
    return
  task_of = {s.wnid: i for i in todo for s in plan.tasks[i]}
  collected = {}
  for wnid, data in source_lib.gzip_release_tars(plan.source, set(task_of)):
    i = task_of[wnid]
    collected.setdefault(i, {})[wnid] = data
    if len(collected[i]) == len(plan.tasks[i]):
      tars = collected.pop(i)
      yield i, encode_task, args(i, [tars[s.wnid] for s in plan.tasks[i]])


def _encode(build, plan, processes, log) -> tuple[list[dict], int]:
  markers = [build / f"task-{i:05d}.json" for i in range(len(plan.tasks))]
  todo = [i for i, m in enumerate(markers) if not m.exists()]

  def done(i, result):
    _mark(markers[i], result)
    log(f"encoded task {i + 1}/{len(markers)}: "
        f"{sum(result['counts'].values())} files")
  hashed_shards.run_jobs(_encode_jobs(build, plan, todo), processes, done)
  return [json.loads(m.read_text()) for m in markers], len(markers) - len(todo)


def _write_shards(build, plan, tasks, version_dir, processes, log):
  template = _template(version_dir)
  n = plan.num_shards
  markers = [build / f"shard-{j:05d}.json" for j in range(n)]
  todo = [j for j, m in enumerate(markers) if not m.exists()]
  files = [os.fspath(build / f"task-{i:05d}.records") for i in range(len(tasks))]
  jobs = [(j, hashed_shards.write_shard,
           ([(f, t["offsets"][j], t["offsets"][j + 1])
             for f, t in zip(files, tasks)], features, plan.wnids,
            os.fspath(template.sharded_filepath(shard_index=j, num_shards=n))))
          for j in todo]

  def done(j, result):
    _mark(markers[j], result)
    log(f"wrote shard {j + 1}/{n}: {result['count']} images")
  hashed_shards.run_jobs(jobs, processes, done)
  return [json.loads(m.read_text()) for m in markers], n - len(todo), template


def _imageless(plan) -> list[str]:
  """Labels with no synset in the source (``label_space`` added them)."""
  present = {s.wnid for task in plan.tasks for s in task}
  return [w for w in plan.wnids if w not in present]


def _description(plan, counts, skipped) -> str:
  extra = _imageless(plan)
  return (
      f"ImageNet-21k from {os.path.basename(plan.source)}: "
      f"{len(plan.wnids)} labels = the sorted WordNet ids of its synsets"
      + (f" and of {', '.join(extra)} (no images; big_vision's label space)"
         if extra else "") + ". "
      f"Re-encoded as RGB JPEG: {counts['cmyk']} CMYK, {counts['not_jpeg']} "
      f"not JPEG; skipped as undecodable: {len(skipped)} "
      f"({', '.join(skipped[:20])}). Records in md5(file_name) order; "
      "configs/i21k_vit.py holds out full[:51200]. Built by "
      "`python -m softattn.data prepare imagenet21k` (softattn).")


def prepare(source: str, data_dir: str | None = None, *,
            processes: int | None = None, num_shards: int | None = None,
            task_bytes: int = TASK_BYTES, build_dir: str | None = None,
            log: Callable[[str], None] = print) -> Report:
  """Builds (or resumes building) ``imagenet21k`` in ``data_dir``.

  ``build_dir`` (default ``<data_dir>/imagenet21k.build``) holds the encoded
  tasks and the resume markers until the end: about the dataset's size. Put
  it on a local disk when ``data_dir`` is on gs://: every shard reads a range
  of every task file.
  """
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  root = epath.Path(data_dir or os.environ.get("TFDS_DATA_DIR")
                    or "~/tensorflow_datasets").expanduser()
  version_dir = root / NAME / VERSION
  if (version_dir / "dataset_info.json").exists():
    raise ImageNet21kPrepareError(
        f"{version_dir} is already prepared; delete it to build again")
  try:
    plan = make_plan(source, num_shards, task_bytes)
  except source_lib.SourceError as e:
    raise ImageNet21kPrepareError(str(e)) from None
  applies = i1k_table_applies(plan.wnids)
  build = epath.Path(build_dir) if build_dir else root / f"{NAME}.build"
  _check_plan(build, plan)
  processes = processes or min(os.cpu_count() or 1, MAX_DEFAULT_PROCESSES)
  log(f"{len(plan.wnids)} synsets in {len(plan.tasks)} tasks -> "
      f"{plan.num_shards} shards, {processes} processes")
  version_dir.mkdir(parents=True, exist_ok=True)
  try:
    tasks, resumed_tasks = _encode(build, plan, processes, log)
  except source_lib.SourceError as e:
    raise ImageNet21kPrepareError(str(e)) from None
  shards, resumed_shards, template = _write_shards(
      build, plan, tasks, version_dir, processes, log)

  counts = {k: sum(t["counts"][k] for t in tasks) for k in _COUNTS}
  skipped = sorted(s for t in tasks for s in t["skipped"])
  split = tfds.core.SplitInfo(
      name=SPLIT, shard_lengths=[s["count"] for s in shards],
      num_bytes=sum(s["num_bytes"] for s in shards), filename_template=template)
  tfds.folder_dataset.write_metadata(
      data_dir=version_dir, features=features(plan.wnids), split_infos=[split],
      filename_template=template, check_data=True,  # TFDS reads one back
      description=_description(plan, counts, skipped),
      homepage="https://www.image-net.org/")
  build.rmtree()
  return Report(len(plan.wnids), sum(split.shard_lengths), counts, skipped,
                resumed_tasks, resumed_shards, applies, os.fspath(version_dir),
                _imageless(plan))


def summary(report: Report) -> Iterable[str]:
  """The lines the command prints at the end."""
  c = report.counts
  yield (f"imagenet21k ready in {report.version_dir}: {report.num_examples} "
         f"images, {report.num_classes} classes")
  yield (f"re-encoded as RGB JPEG: {c['cmyk']} CMYK, {c['not_jpeg']} not JPEG; "
         f"skipped {c['undecodable']} undecodable"
         + (f": {', '.join(report.skipped[:20])}" if report.skipped else ""))
  if report.resumed_tasks or report.resumed_shards:
    yield (f"resumed: {report.resumed_tasks} encode tasks and "
           f"{report.resumed_shards} shards were already done")
  if report.imageless:
    yield (f"labels: the source's {report.num_classes - len(report.imageless)}"
           f" synsets and {', '.join(report.imageless)}, which have no images:"
           f" big_vision's {report.num_classes}-class label order")
  if report.i1k_table_applies:
    yield "i1k-in-i21k: the shipped table (fall11 order) matches these labels"
  else:
    yield (f"i1k-in-i21k: {report.num_classes} classes is not fall11's "
           f"{FALL11_CLASSES}; for i1k accuracy set config.eval."
           f"i21k_wnids_file={report.version_dir}/label.labels.txt")
