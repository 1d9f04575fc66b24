"""Launch commands for Cloud TPU VMs, printed, never executed.

One command per run::

    gcloud compute tpus tpu-vm ssh <tpu> --zone=<zone> [--project=<p>] \\
      --worker=all --command='cd ~/softattn && python3 -m softattn.main \\
        --config=<sweep file>:<arg> --workdir=<gs://.../run> --config.x=...'

``--worker=all`` starts the same process on every host of the slice, which is
what a multi-host JAX program needs (each host feeds its part of the global
batch). The runs of a sweep each take the whole slice, so the printed commands
are meant to be run one after another (pipe them to ``bash``), or spread over
several TPU VMs by hand. Nothing here talks to a cloud: the commands are only
text, so tests and dry runs are free.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Sequence

from softattn.sweep import declaration

# ``~`` must reach the remote shell unquoted to expand there, so the repo
# directory is passed through verbatim and restricted to harmless characters.
_SAFE_DIR = re.compile(r"^[A-Za-z0-9_.~/+-]+$")


def repo_relative(path: str) -> str:
  """``path`` relative to the repository root when it lies inside it.

  The TPU VM has its own checkout, so a local absolute path means nothing
  there; the same file relative to the repo root does.
  """
  root = os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))))
  full = os.path.abspath(path)
  if os.path.commonpath([root, full]) == root:
    return os.path.relpath(full, root)
  return path


def tpu_commands(sweep: declaration.Sweep, *, tpu: str, zone: str,
                 workdir: str, project: str | None = None,
                 repo_dir: str = "~/softattn", python: str = "python3",
                 env: Sequence[str] = (), gcloud_args: Sequence[str] = (),
                 only: Sequence[str] = ()) -> list[str]:
  """One ``gcloud compute tpus tpu-vm ssh`` command per run of ``sweep``.

  Args:
    sweep: the loaded sweep.
    tpu: the TPU VM's name.
    zone: its zone.
    workdir: the sweep directory as seen from the VM (normally ``gs://...``,
      which every host of a multi-host slice can reach).
    project: the Google Cloud project (gcloud's default when None).
    repo_dir: where softattn is checked out on every VM host.
    python: the interpreter on the VM.
    env: ``NAME=value`` settings put in front of the training command.
    gcloud_args: further arguments for ``gcloud ... ssh`` (e.g.
      ``--internal-ip``).
    only: glob patterns of run names (default: every run).

  Returns:
    The commands, as shell lines.
  """
  if not _SAFE_DIR.match(repo_dir):
    raise declaration.SweepError(
        f"--repo_dir {repo_dir!r} may use only letters, digits and "
        "_.~/+- (it is passed to the remote shell unquoted so ~ expands).")
  for e in env:
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", e):
      raise declaration.SweepError(f"--env {e!r}: expected NAME=value.")
  remote_sweep = declaration.Sweep(
      path=repo_relative(sweep.path), arg=sweep.arg, base=sweep.base,
      runs=sweep.runs)
  out = []
  for run in sweep.select(only):
    train = [python, "-m", "softattn.main",
             *declaration.main_args(remote_sweep, run, workdir)]
    remote = f"cd {repo_dir} && " + shlex.join([*env, *train])
    ssh = ["gcloud", "compute", "tpus", "tpu-vm", "ssh", tpu,
           f"--zone={zone}"]
    if project:
      ssh.append(f"--project={project}")
    ssh += ["--worker=all", *gcloud_args, f"--command={remote}"]
    out.append(shlex.join(ssh))
  return out
