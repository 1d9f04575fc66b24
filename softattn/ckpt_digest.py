"""A checkpoint's seal: every file's size and digest, checked before a restore.

Orbax's OCDBT array files carry no checksum of their own, so a flipped bit
restores silently as a different number. ``seal(step_dir)`` writes
``<step_dir>/digests.json`` once the save is complete; ``verify(step_dir)``
compares the files with it and raises ``DigestMismatch`` naming the first
file that is missing, shorter or longer, or different.

Locally the digest is a SHA-256 of the file's bytes (one read of the
checkpoint per save). On a bucket it is the object's CRC32C that GCS itself
computes and keeps (``gcsfs``' object info), so sealing and checking read no
array data: what it catches there is an object replaced or lost.

A step saved but killed before its seal has no ``digests.json``; it is
restored unchecked (Orbax's own errors still catch what they catch).
"""

from __future__ import annotations

import hashlib
import json
import os

from softattn import paths

FILENAME = "digests.json"


class DigestMismatch(ValueError):
  """A sealed checkpoint's file is missing, resized or changed."""


def _local_digests(root: str) -> dict[str, list]:
  out = {}
  for d, _, files in os.walk(root):
    for f in files:
      full = os.path.join(d, f)
      rel = os.path.relpath(full, root)
      if rel == FILENAME:
        continue
      with open(full, "rb") as fh:
        out[rel] = [os.path.getsize(full),
                    "sha256:" + hashlib.file_digest(fh, "sha256").hexdigest()]
  return out


def _remote_digests(root: str) -> dict[str, list]:
  fs, rp = paths._fs(root)  # pylint: disable=protected-access
  rp = rp.rstrip("/")
  out = {}
  for name, info in fs.find(rp, detail=True, withdirs=False).items():
    rel = name[len(rp) + 1:]
    if rel and rel != FILENAME:
      crc = info.get("crc32c") or info.get("md5Hash") or ""
      out[rel] = [int(info.get("size", 0)), f"gcs:{crc}"]
  return out


def digests(step_dir: str) -> dict[str, list]:
  """``{relative path: [size, digest]}`` of every file under ``step_dir``."""
  return (_remote_digests if paths.is_remote(step_dir)
          else _local_digests)(os.fspath(step_dir))


def is_sealed(step_dir: str) -> bool:
  return paths.exists(paths.join(step_dir, FILENAME))


def seal(step_dir: str) -> None:
  """Records the digests of a complete checkpoint's files."""
  paths.write_json(paths.join(step_dir, FILENAME),
                   {"files": digests(step_dir)})


def verify(step_dir: str) -> None:
  """Raises ``DigestMismatch`` if a sealed checkpoint's files changed."""
  text = paths.read_text(paths.join(step_dir, FILENAME))
  if text is None:
    return
  want = json.loads(text)["files"]
  have = digests(step_dir)
  for rel, (size, digest) in sorted(want.items()):
    if rel not in have:
      raise DigestMismatch(f"{rel} is missing")
    if have[rel][0] != size:
      raise DigestMismatch(f"{rel} has {have[rel][0]} bytes, {size} were saved")
    if have[rel][1] != digest:
      raise DigestMismatch(f"{rel} differs from what was saved (digest)")
