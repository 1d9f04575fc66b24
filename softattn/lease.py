"""One writer per workdir: a lease that holds on a local disk and on gs://.

Two runs training into one workdir would each write every metric twice and
resume from each other's live checkpoints. ``Lease(workdir).acquire()``
makes the second one fail at start with ``WorkdirBusy``: one line with the
owner's host and pid (``softattn.main``: exit 2).

* **Local folder:** ``flock`` on ``<workdir>/lease.lock``, held for the life
  of the process. The kernel drops it when the process dies, however it dies,
  so a killed run never leaves a stale lock. ``lease.json`` beside it names
  the owner for the message.
* **gs://:** GCS has no locks, so ``lease.json`` *is* the lease: an object
  with ``owner`` (a random id), ``host``, ``pid``, ``started`` and
  ``heartbeat`` (the holder's clock, seconds since the epoch), created with
  the precondition "does not exist" (``ifGenerationMatch=0``) and refreshed
  every ``HEARTBEAT_S`` by a daemon thread with "is still the generation I
  wrote" (GCS answers 412 otherwise, which gcsfs raises as
  ``FileExistsError``). A lease whose heartbeat is older than ``STALE_S``
  belongs to a run that is gone (a VM lost with its process) and is taken
  over, again under a generation precondition, so of two runs taking over
  at once one wins. So is a lease of a process on this host that no longer
  exists. Hosts' clocks are assumed to agree to well within ``STALE_S`` (TPU
  VMs run NTP).

  A run that finds its lease taken over (its refresh gets 412) sets
  ``lost``; the training loop stops at its next step with ``WorkdirBusy``.

Only process 0 of a multi-host run holds the lease. ``SOFTATTN_LEASE_STALE_S``
and ``SOFTATTN_LEASE_HEARTBEAT_S`` override the defaults (docs/training.md).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid

from softattn import paths

FILENAME = "lease.json"
LOCKFILE = "lease.lock"
HEARTBEAT_S = float(os.environ.get("SOFTATTN_LEASE_HEARTBEAT_S", "30"))
STALE_S = float(os.environ.get("SOFTATTN_LEASE_STALE_S", "120"))


class WorkdirBusy(paths.PathError):
  """Another live run holds the workdir (one line naming it)."""


def _pid_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # alive, someone else's
    return True
  return True


def _describe(record: dict | None) -> str:
  if not record:
    return "another process"
  return f"host {record.get('host')} pid {record.get('pid')}"


class Lease:
  """The workdir's single-writer lease (see the module docstring)."""

  def __init__(self, workdir: str, *, stale_s: float | None = None,
               heartbeat_s: float | None = None):
    self.workdir = os.fspath(paths.path(workdir))
    self.stale_s = STALE_S if stale_s is None else stale_s
    self.heartbeat_s = HEARTBEAT_S if heartbeat_s is None else heartbeat_s
    self.record = {"owner": uuid.uuid4().hex, "host": socket.gethostname(),
                   "pid": os.getpid(), "started": time.time()}
    self.lost = threading.Event()
    self._lock_fd: int | None = None
    self._generation: str | None = None
    self._stop = threading.Event()
    self._thread: threading.Thread | None = None

  @property
  def path(self) -> str:
    return paths.join(self.workdir, FILENAME)

  def _payload(self) -> bytes:
    return json.dumps(dict(self.record, heartbeat=time.time())).encode()

  def acquire(self) -> "Lease":
    """Takes the lease or raises ``WorkdirBusy``."""
    if paths.is_remote(self.workdir):
      self._acquire_remote()
      self._thread = threading.Thread(target=self._beat, daemon=True,
                                      name="workdir-lease")
      self._thread.start()
    else:
      self._acquire_local()
    return self

  # -- local: flock -----------------------------------------------------------

  def _acquire_local(self) -> None:
    import fcntl  # pylint: disable=g-import-not-at-top
    paths.makedirs(self.workdir)
    fd = os.open(os.path.join(self.workdir, LOCKFILE), os.O_RDWR | os.O_CREAT,
                 0o644)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      os.close(fd)
      raise WorkdirBusy(
          f"{self.workdir} is in use by a live run ({_describe(self._read())}); "
          "wait for it to end, stop it, or pick another --workdir") from None
    self._lock_fd = fd
    paths.write_atomic(self.path, self._payload())

  # -- gs://: generation preconditions ---------------------------------------

  def _read(self) -> dict | None:
    try:
      text = paths.read_text(self.path)
      return json.loads(text) if text else None
    except (ValueError, OSError):
      return None

  def _upload(self, generation: str | int) -> None:
    """Writes the lease if its generation is ``generation`` (0: absent)."""
    from fsspec.asyn import sync  # pylint: disable=g-import-not-at-top
    fs, rp = paths._fs(self.path)  # pylint: disable=protected-access
    bucket, key = rp.split("/", 1)
    meta = json.dumps({"name": key, "contentType": "application/json"})
    body = ("--==lease==\nContent-Type: application/json; charset=UTF-8\n\n"
            f"{meta}\n--==lease==\nContent-Type: application/json\n\n"
            ).encode() + self._payload() + b"\n--==lease==--"
    out = sync(fs.loop, fs._call, "POST",  # pylint: disable=protected-access
               f"{fs._location}/upload/storage/v1/b/{bucket}/o",  # pylint: disable=protected-access
               uploadType="multipart", ifGenerationMatch=str(generation),
               headers={"Content-Type":
                        'multipart/related; boundary="==lease=="'},
               data=body, json_out=True)
    self._generation = str(out["generation"])

  def _acquire_remote(self) -> None:
    try:
      self._upload(0)
      return
    except FileExistsError:
      pass
    fs, rp = paths._fs(self.path)  # pylint: disable=protected-access
    fs.invalidate_cache(rp)
    try:
      generation = str(fs.info(rp)["generation"])
    except FileNotFoundError:  # released meanwhile: try once more
      generation = "0"
    record = self._read() or {}
    age = time.time() - float(record.get("heartbeat", 0) or 0)
    dead_here = (record.get("host") == self.record["host"]
                 and isinstance(record.get("pid"), int)
                 and not _pid_alive(record["pid"]))
    if generation != "0" and age < self.stale_s and not dead_here:
      raise WorkdirBusy(
          f"{self.workdir} is in use by a live run ({_describe(record)}, "
          f"heartbeat {age:.0f} s ago); wait for it to end, stop it, or pick "
          f"another --workdir (a lease without heartbeat for {self.stale_s:.0f}"
          " s is taken over)")
    try:
      self._upload(generation)
    except FileExistsError:
      raise WorkdirBusy(f"{self.workdir}: another run took over its stale lease "
                        "at the same moment; pick another --workdir") from None

  def _upload_or_lose(self) -> None:
    """One heartbeat; sets ``lost`` if another run has taken the lease."""
    try:
      self._upload(self._generation)
    except FileExistsError:
      self.lost.set()  # taken over: the loop stops at its next step
    except Exception:  # pylint: disable=broad-except
      pass  # an outage: the next beat tries again; the loop's writes report it

  def _beat(self) -> None:
    while not self._stop.wait(self.heartbeat_s) and not self.lost.is_set():
      self._upload_or_lose()

  # -- both -------------------------------------------------------------------

  def check(self) -> None:
    """Raises ``WorkdirBusy`` if another run has taken the lease over."""
    if self.lost.is_set():
      raise WorkdirBusy(f"{self.workdir}: another run took over this run's "
                        f"lease ({_describe(self._read())}); stopping")

  def release(self) -> None:
    """Gives the lease up (idempotent); errors are left to the next start."""
    self._stop.set()
    if self._thread is not None:
      self._thread.join(timeout=5)
      self._thread = None
    if self._lock_fd is not None:
      os.close(self._lock_fd)  # drops the flock
      self._lock_fd = None
    elif self._generation is not None and not self.lost.is_set():
      # At most a few seconds: in an outage gcsfs would retry for half a
      # minute, and a lease left behind is taken over after STALE_S anyway.
      t = threading.Thread(target=self._delete, daemon=True)
      t.start()
      t.join(timeout=5)
      self._generation = None

  def _delete(self) -> None:
    try:
      paths.remove(self.path)
    except Exception:  # pylint: disable=broad-except
      pass

  def __enter__(self) -> "Lease":
    return self.acquire()

  def __exit__(self, *exc) -> None:
    self.release()
