"""Metric writers: TensorBoard + ``metrics.jsonl`` + console, via CLU.

Scalars are named ``<split>/<metric>`` (``train/loss``, ``eval/accuracy``,
``info/num_params``): TensorBoard groups them by split, and the JSONL writer
turns each ``write_scalars`` call into one line per split,
``{"step": 100, "split": "train", "loss": 0.7, ...}``, which scripts read with
``read_jsonl`` (which names any line a crash tore rather than drop it). Only
process 0 writes files; other hosts just log.

Files go through ``softattn.paths``: on a ``gs://`` workdir ``metrics.jsonl``
is rolled whole-object parts (objects cannot be appended to) and the
TensorBoard events come from ``softattn.events``; ``read_jsonl`` reads both
forms.
"""

from __future__ import annotations

import json
import math
import threading
import warnings
from typing import Any, Mapping

import numpy as np
from clu import metric_writers
from clu.metric_writers import interface

from softattn import events, paths

SPLITS = ("train", "eval", "info")


def _jsonable(v: Any) -> Any:
  if isinstance(v, (np.ndarray, np.generic)) or hasattr(v, "__array__"):
    v = np.asarray(v)
    v = v.item() if v.ndim == 0 else v.tolist()
  if isinstance(v, float) and not math.isfinite(v):
    return str(v)  # JSON has no NaN/Inf; keep them readable
  return v


class JsonlWriter(events.ScalarsAndTexts):
  """A CLU ``MetricWriter`` appending one JSON object per split and step.

  Appends to a ``paths.AppendLog``: the file itself locally, whole-object
  parts on a bucket; each ``write_*`` call is flushed (one small upload).
  """

  def __init__(self, path: str):
    self.path = path
    self._lock = threading.Lock()
    self._f = paths.AppendLog(path)

  def _write(self, step: int, values: Mapping[str, Any]) -> None:
    by_split: dict[str, dict[str, Any]] = {}
    for name, v in values.items():
      split, _, key = name.partition("/")
      if not key or split not in SPLITS:
        split, key = "train", name
      by_split.setdefault(split, {})[key] = _jsonable(v)
    with self._lock:
      for split, vals in by_split.items():
        self._f.write(json.dumps({"step": int(step), "split": split, **vals}) + "\n")
      self._f.flush()

  def write_scalars(self, step, scalars):
    self._write(step, scalars)

  def write_texts(self, step, texts):
    self._write(step, texts)

  def write_hparams(self, hparams):
    self._write(0, {f"info/hparams/{k}": _jsonable(v) for k, v in hparams.items()})

  def flush(self):
    with self._lock:
      self._f.flush()

  def close(self):
    with self._lock:
      self._f.close()


class _CloseEach:
  """``close`` reaches every writer even when one fails (a full disk):
  clu's ``MultiWriter`` stops at the first error, leaving the later writers'
  files open for Python to flush, and fail on, again at exit."""

  def close(self):
    errors = []
    for w in self._writers:  # clu's MultiWriter keeps them here
      try:
        w.close()
      except Exception as e:  # pylint: disable=broad-except
        errors.append(e)
    if errors:
      raise errors[0]


class _MultiWriter(_CloseEach, metric_writers.MultiWriter):
  pass


class _AsyncMultiWriter(_CloseEach, metric_writers.AsyncMultiWriter):
  pass


def make_writer(workdir: str, *, is_main: bool,
                asynchronous: bool = True) -> metric_writers.MetricWriter:
  """Logging + TensorBoard (``workdir``) + ``workdir/metrics.jsonl`` on process 0."""
  writers: list[interface.MetricWriter] = [metric_writers.LoggingWriter()]
  if is_main:
    paths.makedirs(workdir)
    # tf.summary cannot reach a bucket through the same client (see events).
    writers.append(events.EventsWriter(workdir) if paths.is_remote(workdir)
                   else metric_writers.SummaryWriter(workdir))
    writers.append(JsonlWriter(paths.join(workdir, "metrics.jsonl")))
  if asynchronous:
    return _AsyncMultiWriter(writers)
  return _MultiWriter(writers)


def read_jsonl(path: str, split: str | None = None) -> list[dict[str, Any]]:
  """The records of a ``metrics.jsonl`` (file or parts), optionally one split.

  A line that does not parse (a write torn by a kill or a full disk) is
  skipped, and named: one ``paths.UnparsableLinesWarning`` gives each file and
  line number (``paths.scan_json_lines`` returns them instead). Raises
  ``FileNotFoundError`` when there is neither the file nor a part.
  """
  recs, bad = paths.scan_json_lines(path)
  if not recs and not bad and not paths.exists(path):
    raise FileNotFoundError(path)
  if bad:
    # Attributed to the caller's line (a notebook cell), once per message.
    warnings.warn(paths.describe_unparsable(bad), paths.UnparsableLinesWarning,
                  stacklevel=2)
  return [r for r in recs if split is None or r.get("split") == split]
