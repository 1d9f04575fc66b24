"""I/O faults the retries could not absorb, as one line and exit code 4.

gcsfs retries a failed request with backoff (about 30 s in all, see
docs/training.md) and tensorstore does the same for array data; a fault that
outlasts them reaches the training loop as whatever the failing library
raised: an ``OSError`` with an errno, aiohttp's connection errors, gcsfs'
``HttpError``, tensorstore's ``ValueError`` with a status text, often wrapped
by Orbax. ``classify`` walks the exception's chain and names the cause;
``WorkdirIOError`` carries it, the path and the step to ``softattn.main``.
"""

from __future__ import annotations

import errno
import logging

UNREACHABLE = "unreachable"
QUOTA = "quota exceeded"
DISK_FULL = "disk full"
FILE_TOO_LARGE = "file size limit"
PERMISSION = "permission denied"

# (cause, errnos, words in the message of some exception of the chain)
_RULES = (
    (DISK_FULL, {errno.ENOSPC, errno.EDQUOT}, ("no space left",)),
    (FILE_TOO_LARGE, {errno.EFBIG}, ("file too large",)),
    (PERMISSION, {errno.EACCES, errno.EPERM, errno.EROFS},
     ("permission denied", "read-only file system", "forbidden")),
    (QUOTA, set(), ("quota", "ratelimit", "rate limit", "429",
                    "resource_exhausted", "too many requests")),
    (UNREACHABLE, {errno.ECONNREFUSED, errno.ECONNRESET, errno.EHOSTUNREACH,
                   errno.ENETUNREACH, errno.ETIMEDOUT, errno.EPIPE},
     ("cannot connect", "connection refused", "connection reset",
      "server disconnected", "timed out", "timeout", "unavailable",
      "name or service not known", "temporary failure in name resolution",
      "clientconnectorerror", "serverdisconnectederror")),
)


class _DropRaisedAgain(logging.Filter):
  """Drops a library's log record of an I/O fault it then raises to us.

  clu's ``AsyncMultiWriter`` logs a failed write with its traceback in its
  own thread, then raises it again as ``AsyncError`` in the loop's; gcsfs
  logs "out of retries" with the traceback, then raises it. Either way the
  loop's one line reports it; the first report would be a traceback storm.
  """

  def filter(self, record: logging.LogRecord) -> bool:
    exc = record.exc_info[1] if record.exc_info else None
    return exc is None or classify(exc) is None


def quiet_reraised_io_errors() -> None:
  """Installs the filter above on clu's (absl's) and gcsfs' loggers, once."""
  for name in ("absl", "gcsfs"):
    logger = logging.getLogger(name)
    if not any(isinstance(f, _DropRaisedAgain) for f in logger.filters):
      logger.addFilter(_DropRaisedAgain())


class WorkdirIOError(OSError):
  """A read or write under the workdir failed for good (exit code 4)."""

  def __init__(self, message: str, cause: str, step: int | None):
    super().__init__(message)
    self.cause, self.step = cause, step


def _chain(e: BaseException):
  seen = set()
  while e is not None and id(e) not in seen:
    seen.add(id(e))
    yield e
    e = e.__cause__ or e.__context__


def classify(e: BaseException) -> str | None:
  """The I/O cause behind ``e`` (``DISK_FULL``, ...), or ``None`` if not I/O."""
  chain = list(_chain(e))
  for cause, errnos, words in _RULES:
    for x in chain:
      if isinstance(x, OSError) and x.errno in errnos:
        return cause
      # By message: tensorstore's ValueErrors, TF's ResourceExhaustedError
      # (its TensorBoard writer), clu's AsyncError, gcsfs' HttpError. Not
      # jax's own errors: an "UNAVAILABLE" there is a peer, not the workdir.
      if type(x).__module__.split(".")[0] in ("jax", "jaxlib"):
        continue
      text = f"{type(x).__name__}: {x}".lower()
      if any(w in text for w in words):
        return cause
  return None


def filename(e: BaseException) -> str | None:
  """The path an ``OSError`` in ``e``'s chain names, if any."""
  for x in _chain(e):
    if isinstance(x, OSError) and x.filename:
      return str(x.filename)
  return None
