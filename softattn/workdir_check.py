"""The start-up check of a workdir: one line and exit 2, before anything runs.

``softattn.main`` calls ``check_writable(workdir)`` after the config's checks
and before anything compiles, on every process (every host must reach the
workdir). A bucket that does not exist, a host that does not answer (a
stale ``STORAGE_EMULATOR_HOST`` at once), missing credentials, a refused
write or a local folder that cannot be created each become one
``paths.PathError`` line naming the fix, instead of a traceback minutes later
at the first checkpoint.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import urllib.parse

from softattn import paths

# How long the check waits for a bucket (gcsfs retries an unreachable host
# with backoff for about 30 s before it gives up).
CHECK_TIMEOUT_S = float(os.environ.get("SOFTATTN_PATH_CHECK_TIMEOUT_S", "60"))
# How long a TCP connect to STORAGE_EMULATOR_HOST may take: an emulator is
# local or next door; refused (nothing listening) is answered at once.
EMULATOR_CONNECT_S = 5.0


def _credentials_problem(p: paths.Path) -> str | None:
  """Why ``gs://`` writes will be refused for lack of credentials, if so.

  Without credentials (no ``GOOGLE_APPLICATION_CREDENTIALS``, no ``gcloud
  auth application-default login``, no VM metadata server) gcsfs falls back
  to anonymous access, which GCS refuses for writes only after a minute of
  retries. Asked first, Google's own lookup (``google.auth.default``, what
  gcsfs tries first) says so in about a second. Skipped for an emulator
  (``STORAGE_EMULATOR_HOST``) and for a token set in fsspec's config.
  """
  if not os.fspath(p).startswith("gs://") or \
      os.environ.get("STORAGE_EMULATOR_HOST"):
    return None
  try:
    import fsspec.config  # pylint: disable=g-import-not-at-top
    import gcsfs  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    import google.auth  # pylint: disable=g-import-not-at-top
  except ImportError:
    return f"{p}: gs:// paths need gcsfs (pip install gcsfs)"
  if fsspec.config.conf.get("gs", {}).get("token"):
    return None
  try:
    google.auth.default()
  except google.auth.exceptions.DefaultCredentialsError:
    return (f"{p}: no Google Cloud credentials found; on a TPU VM give the "
            "VM's service account storage access, elsewhere run `gcloud auth "
            "application-default login` or set GOOGLE_APPLICATION_CREDENTIALS")
  return None


def _emulator_problem(p: paths.Path) -> str | None:
  """Why the emulator ``STORAGE_EMULATOR_HOST`` names cannot be reached, if so.

  A stale variable (an emulator since stopped) would otherwise cost gcsfs'
  ~40 s of retries and two tracebacks before the same verdict; one TCP
  connect says it at once.
  """
  url = os.environ.get("STORAGE_EMULATOR_HOST")
  if not url or not os.fspath(p).startswith("gs://"):
    return None
  where = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
  try:
    port = where.port or (443 if where.scheme == "https" else 80)
    with socket.create_connection((where.hostname, port),
                                  timeout=EMULATOR_CONNECT_S):
      return None
  except ConnectionRefusedError:
    why = "connection refused"
  except socket.timeout:
    why = f"no connection in {EMULATOR_CONNECT_S:.0f} s"
  except (OSError, ValueError) as e:  # unknown host, malformed port
    why = " ".join(str(e).split())
  return (f"{p}: no answer from {url} (STORAGE_EMULATOR_HOST): {why}; start "
          "the emulator there, or unset STORAGE_EMULATOR_HOST to use GCS")


class _DropGcsfsErrors(logging.Filter):
  """gcsfs logs each request that ran out of retries with its traceback; the
  check's one line already says what failed."""

  def filter(self, record):
    return record.levelno < logging.ERROR


@contextlib.contextmanager
def _quiet_gcsfs():
  logger, f = logging.getLogger("gcsfs"), _DropGcsfsErrors()
  logger.addFilter(f)
  try:
    yield
  finally:
    logger.removeFilter(f)


def _probe(p: paths.Path) -> None:
  """Creates ``p`` and writes, reads back and deletes one small object in it."""
  paths.makedirs(p)
  probe = p / f".write_check.{socket.gethostname()}.{os.getpid()}"
  paths.write_bytes(probe, b"ok")
  if paths.read_bytes(probe) != b"ok":
    raise OSError(f"{probe} did not read back what was written")
  paths.remove(probe)


def _explain(p: paths.Path, e: BaseException) -> str:
  """One line for a failed probe of ``p``."""
  text = " ".join(str(e).split())[:300]
  if paths.is_remote(p):
    bucket = os.fspath(p).split("://", 1)[1].split("/", 1)[0]
    if isinstance(e, FileNotFoundError):
      return (f"{p}: bucket gs://{bucket} does not exist (create it with "
              f"`gcloud storage buckets create gs://{bucket}` or fix the name)")
    code = getattr(e, "code", None)
    if isinstance(e, PermissionError) or code in (401, 403) or \
        "Forbidden" in text:
      return (f"{p}: permission denied on gs://{bucket} ({text}); give this "
              "account (the TPU VM's service account) roles/storage.objectAdmin "
              "on the bucket")
    return f"{p}: cannot reach gs://{bucket} ({type(e).__name__}: {text})"
  return (f"{p}: cannot write the workdir here ({type(e).__name__}: {text}); "
          "pick a folder you can write to")


def check_writable(p: paths.PathLike, *, timeout_s: float | None = None) -> str:
  """Checks that a run can write under ``p``; returns it as a string.

  Creates ``p``, writes, reads back and deletes one small object. Raises
  ``PathError`` with one line for a missing bucket, an unreachable host
  (nothing answered within ``timeout_s``, default ``CHECK_TIMEOUT_S``),
  missing credentials, no permission, or a local folder that cannot be
  created or written. Runs before anything compiles (``softattn.main``).
  """
  target = paths.path(p)
  problem = _emulator_problem(target) or _credentials_problem(target)
  if problem:
    raise paths.PathError(problem)
  timeout_s = CHECK_TIMEOUT_S if timeout_s is None else timeout_s
  result: list[BaseException | None] = []

  def attempt():
    try:
      _probe(target)
      result.append(None)
    except BaseException as e:  # pylint: disable=broad-except
      result.append(e)

  # A daemon thread: an unreachable host retries far longer than is useful to
  # wait at start-up, and the process exits right after a failed check.
  t = threading.Thread(target=attempt, daemon=True, name="check_writable")
  start = time.monotonic()
  with _quiet_gcsfs():
    t.start()
    t.join(timeout_s)
  if not result:
    host = os.environ.get("STORAGE_EMULATOR_HOST") or "storage.googleapis.com"
    raise paths.PathError(
        f"{target}: no answer from {host} in {time.monotonic() - start:.0f} "
        "s; check the network (and STORAGE_EMULATOR_HOST if you use an "
        "emulator)")
  if result[0] is not None:
    raise paths.PathError(_explain(target, result[0]))
  return os.fspath(target)
