"""TensorBoard event files written through ``softattn.paths`` (for ``gs://``).

A local workdir keeps CLU's ``SummaryWriter`` (``tf.summary``). On a bucket
this writer is used instead: ``tf.summary`` writes through ``tf.io.gfile``,
TF's own GCS client, which buffers the file on local disk and cannot be
pointed at anything but storage.googleapis.com, so it would be the one client
of a run that the emulator tests could not exercise, and the one that leaves
files on the VM's disk. Writing locally and syncing would keep a second copy
on a disk a preemption loses.

The format is TensorBoard's own: ``Event`` protos (``event_pb2``) framed as
TFRecords (length, masked CRC-32C of the length, data, masked CRC-32C of the
data: tensorboard's ``RecordWriter``), scalars and texts as the summaries
``tf.summary.scalar``/``tf.summary.text`` produce (``scalar_pb``,
``text_pb``). The bytes go to a ``paths.AppendLog`` whose parts are named
``events.out.tfevents.<start time>.<host>.<pid>.part-<k>``: each part is a
complete event file (TFRecord streams concatenate), TensorBoard reads every
``*tfevents*`` file of a folder in name order, and the start time orders
the attempts of a resumed run.
"""

from __future__ import annotations

import socket
import os
import time
from typing import Any, Mapping

import numpy as np
from clu.metric_writers import interface
from tensorboard.compat.proto import event_pb2
from tensorboard.plugins.scalar import summary_v2 as scalar_summary
from tensorboard.plugins.text import summary_v2 as text_summary
from tensorboard.summary.writer import record_writer

from softattn import paths


class ScalarsAndTexts(interface.MetricWriter):
  """A CLU ``MetricWriter`` base for writers of scalars, texts and hparams
  only: the training loop writes no tensors, images or media, so those
  methods do nothing (``EventsWriter`` here, ``metrics.JsonlWriter``)."""

  def write_summaries(self, step, values, metadata=None):
    del step, values, metadata

  def write_images(self, step, images):
    del step, images

  def write_videos(self, step, videos):
    del step, videos

  def write_audios(self, step, audios, *, sample_rate):
    del step, audios, sample_rate

  def write_histograms(self, step, arrays, num_buckets=None):
    del step, arrays, num_buckets


class EventsWriter(ScalarsAndTexts):
  """A CLU ``MetricWriter``: scalars and texts to TensorBoard event files."""

  def __init__(self, logdir: paths.PathLike):
    start = time.time()
    stem = f"events.out.tfevents.{int(start):010d}.{socket.gethostname()}.{os.getpid()}"
    # Binary TFRecords: no newline is ever added to a torn end.
    self._log = paths.AppendLog(paths.join(logdir, stem),
                                part_names=lambda k: f"{stem}{paths.PART}{k:06d}",
                                lines=False)
    self._records = record_writer.RecordWriter(self._log)
    self._event(event_pb2.Event(wall_time=start, file_version="brain.Event:2"))

  def _event(self, event: event_pb2.Event) -> None:
    self._records.write(event.SerializeToString())

  def _summaries(self, step: int, summaries) -> None:
    event = event_pb2.Event(wall_time=time.time(), step=int(step))
    for s in summaries:
      event.summary.value.extend(s.value)
    self._event(event)

  def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
    self._summaries(step, [scalar_summary.scalar_pb(k, float(np.asarray(v)))
                           for k, v in scalars.items()])

  def write_texts(self, step: int, texts: Mapping[str, str]) -> None:
    self._summaries(step, [text_summary.text_pb(k, str(v))
                           for k, v in texts.items()])

  def write_hparams(self, hparams: Mapping[str, Any]) -> None:
    self.write_texts(0, {"hparams": "\n".join(
        f"{k}: {v}" for k, v in sorted(hparams.items()))})

  def flush(self) -> None:
    self._log.flush()

  def close(self) -> None:
    self._log.close()
