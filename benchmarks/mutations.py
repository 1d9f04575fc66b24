"""A mutation sample: 20 one-line faults the test suite must catch.

  python benchmarks/mutations.py --check              # each `old` once, fast
  python benchmarks/mutations.py --repo . -n 2 --out /tmp/mutants.json
  python benchmarks/mutations.py --repo . --tests-from ../new --only NAME,...

Each ``Mutant`` replaces ``old`` (found exactly once in ``path``) by ``new``
and runs its ``tests`` (the few that exercise that code) with ``pytest -x``,
on a copy of ``--repo``'s *committed HEAD* (``git archive``: uncommitted
edits are not tested) whose ``tests/`` is ``--tests-from``'s committed one
(default: the same repo), so two suites meet the same library code.
``PYTHONPATH`` puts the copy first: ``import softattn`` is the mutant, not the
editable install. Caught: pytest failed (exit 1, or 2 for a collection
error); exit 3-5 (internal error, a test id not found, no tests) is an error
of the table. The printed table names the first failing test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Mutant(NamedTuple):
  name: str
  path: str                 # a file under softattn/
  old: str                  # occurs exactly once in that file
  new: str                  # its replacement, one line
  why: str                  # the bug it models
  tests: tuple[str, ...]    # pytest node ids (or files) that should catch it


_REF = "tests/test_normalizers.py::test_matches_reference"
_MODES = "tests/test_modes.py::test_dense_weights_are_the_single_block_case"
_PF32 = "tests/test_pallas.py::test_pallas_f32_equals_dense"
_DAMAGED = ("tests/test_faults.py::test_a_damaged_newest_checkpoint_is_moved_"
            "aside_and_the_run_falls_back")
_PATHS = "tests/test_paths.py::test_"

MUTANTS = (
    Mutant("norm-moments-mask", "softattn/normalizers/core.py",
           "centered = masked(valid, s - mean, 0.0)", "centered = s - mean",
           "masked keys counted in the row variance (dropped mask)",
           (_REF + "[nap]", _REF + "[normsoftmax]")),
    Mutant("norm-relu-exponent", "softattn/normalizers/pointwise.py",
           "_safe_n(stats) ** (-alpha) * _activation(act)(s)",
           "_safe_n(stats) ** alpha * _activation(act)(s)",
           "relu/n multiplies by n^alpha (wrong sign of the exponent)",
           (_REF + "[relu_seqlen]", "tests/test_normalizers.py::"
            "test_relu_seqlen_counts_only_unmasked_keys")),
    Mutant("norm-logitnorm-tau", "softattn/normalizers/softmax_family.py",
           "tau = 1.0 / jnp.sqrt(jnp.maximum(stats.n, 1.0))",
           "tau = 1.0 / jnp.maximum(stats.n, 1.0)",
           "LogitNorm's default temperature n^-1, not n^-1/2",
           (_REF + "[logitnorm]",)),
    Mutant("norm-stablemax-branch", "softattn/normalizers/l1_normalized.py",
           "neg = s < 0", "neg = s > 0",
           "StableMax's two branches swapped (flipped comparison)",
           (_REF + "[stablemax]",)),
    Mutant("modes-acc-rescale", "softattn/modes.py",
           "l, acc = l * corr, acc * corr", "l, acc = l * corr, acc",
           "online softmax does not rescale the accumulator on a new max",
           (_MODES,)),
    Mutant("modes-pointwise-mask", "softattn/modes.py",
           "return m, None, masked(valid, t, 0.0), None",
           "return m, None, t, None",
           "pointwise mode gives masked keys weight (dropped mask)", (_MODES,)),
    Mutant("modes-exp-grad-sign", "softattn/modes.py",
           "return w, w * (dp - di)", "return w, w * (dp + di)",
           "fused softmax backward dt = w (dp + di) (wrong sign)",
           (_PF32 + "[softmax-key_mask]",)),
    Mutant("kernel-causal-diagonal", "softattn/pallas/common/tile.py",
           "valid = jnp.logical_and(valid, kpos <= qpos)",
           "valid = jnp.logical_and(valid, kpos < qpos)",
           "causal mask drops the diagonal (off by one)",
           (_PF32 + "[softmax-causal]",)),
    Mutant("kernel-stats-merge", "softattn/pallas/tpu/forward.py",
           "m2b + delta * delta * (na * nb / jnp.maximum(n, 1.0))", "m2b",
           "Chan's merge of block variances drops the between-block term",
           (_PF32 + "[nap-key_mask]", _PF32 + "[normsoftmax-causal]")),
    Mutant("kernel-dvar-factor", "softattn/pallas/tpu/backward.py",
           '(dmean + 2.0 * dvar * (s - rv["mean"]))',
           '(dmean + dvar * (s - rv["mean"]))',
           "backward through the variance misses its factor 2",
           (_PF32 + "[nap-key_mask]",)),
    Mutant("shard-mesh-too-big", "softattn/sharding.py",
           "if int(np.prod(sizes)) > num_devices or",
           "if int(np.prod(sizes)) < num_devices or",
           "a mesh larger than the devices is accepted (flipped comparison)",
           ("tests/test_train_units.py::test_mesh_shape_and_errors",)),
    Mutant("shard-tp-axis", "softattn/sharding.py",
           "for i in reversed(range(len(shape))):",
           "for i in range(len(shape)):",
           "tp splits the first divisible dimension, not the last (wrong axis)",
           ("tests/test_train_units.py::"
            "test_sharding_rules_pick_divisible_dims",)),
    Mutant("shard-drop-data-axis", "softattn/sharding.py",
           'rest = tuple(a for a in entry if a != "data")',
           'rest = tuple(a for a in entry if a == "data")',
           "without_data_axis keeps 'data', drops 'model' of a tuple entry",
           ("tests/test_steps.py::test_without_data_axis_keeps_model_sharding",)),
    Mutant("ckpt-seal-filter", "softattn/ckpt_digest.py",
           "if rel == FILENAME:", "if rel != FILENAME:",
           "the seal covers no data file: a flipped bit restores silently",
           (_DAMAGED + "[bit_flip]",)),
    Mutant("ckpt-walk-order", "softattn/checkpointing.py",
           "for step in reversed(self.all_steps()):",
           "for step in self.all_steps():",
           "restore tries the oldest step first, not the newest",
           (_DAMAGED + "[truncated]",)),
    Mutant("lease-stale-compare", "softattn/lease.py",
           "age < self.stale_s and not dead_here",
           "age > self.stale_s and not dead_here",
           "a live bucket lease is taken over (flipped staleness test)",
           ("tests/test_faults.py::test_a_stale_lease_on_a_bucket_is_taken_"
            "over_and_a_live_one_refused",)),
    Mutant("paths-remote-abspath", "softattn/paths.py",
           "return Path(s if is_remote(s) else os.path.abspath(s))",
           "return Path(os.path.abspath(s))",
           "gs://b/run made a local path under the cwd (missing remote check)",
           (_PATHS + "relative_paths_stay_relative_when_joined_and_absolute_"
            "for_orbax",)),
    Mutant("paths-atomic-parent", "softattn/paths.py",
           "makedirs(target.parent)", "pass",
           "write_atomic no longer creates the parent folder (skipped call)",
           (_PATHS + "write_atomic_replaces_whole_and_leaves_no_temporary",)),
    Mutant("paths-torn-line", "softattn/paths.py",
           "torn = lines and not _ends_in_newline(self.path)",
           "torn = lines and _ends_in_newline(self.path)",
           "AppendLog ends whole logs' last line, not torn ones (dropped not)",
           (_PATHS + "a_log_is_the_file_then_its_parts_and_torn_lines_are_"
            "skipped",)),
    Mutant("config-batch-bound", "softattn/config_schema.py",
           'Bound("batch_size", 1,', 'Bound("batch_size", 0,',
           "batch_size=0 accepted (bound off by one)",
           ("tests/test_faults_config.py::test_bad_config_is_one_line_before_"
            "the_workdir[batch_size_zero]",)),
)


def _read(path: str) -> str:
  with open(path, encoding="utf-8") as f:
    return f.read()


def problems(root: str = REPO, mutants=MUTANTS) -> list[str]:
  """What does not match the files under ``root``: each ``old`` once,
  ``new`` one line and different."""
  out = []
  for m in mutants:
    f = os.path.join(root, m.path)
    n = _read(f).count(m.old) if os.path.isfile(f) else 0
    if n != 1:
      out.append(f"{m.name}: {m.old!r} occurs {n} times in {m.path}")
    if m.new == m.old or "\n" in m.new:
      out.append(f"{m.name}: `new` must differ from `old` and be one line")
  return out


def _export(src: str, dst: str, *paths: str) -> None:
  """``git archive HEAD [paths]`` of repo ``src``, extracted into ``dst``."""
  git = subprocess.Popen(["git", "-C", src, "archive", "HEAD", *paths],
                         stdout=subprocess.PIPE)
  subprocess.run(["tar", "-x", "-C", dst], stdin=git.stdout, check=True)
  git.stdout.close()
  if git.wait():
    sys.exit(f"git archive HEAD {' '.join(paths)} failed in {src}")


def _pytest(copy: str, tests, workers: int, timeout: float):
  """``(exit code, None on timeout; first failing node id; seconds; output)``."""
  env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=os.pathsep.join(
      [copy] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
  cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
         *(["-n", str(workers)] if workers > 1 else ["-p", "no:xdist"]), *tests]
  start = time.monotonic()
  proc = subprocess.Popen(cmd, cwd=copy, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True,
                          start_new_session=True)
  try:
    out, code = proc.communicate(timeout=timeout)[0], proc.returncode
  except subprocess.TimeoutExpired:
    os.killpg(proc.pid, signal.SIGKILL)   # pytest and its xdist workers
    out, code = proc.communicate()[0], None
  hits = re.findall(r"^(?:FAILED|ERROR) (\S+)", out, re.M)
  return code, (hits[0] if hits else None), time.monotonic() - start, out


def run(args) -> list[dict]:
  """Each selected mutant applied to a fresh copy's file, its tests run."""
  copy, rows = tempfile.mkdtemp(prefix="softattn-mutants-"), []
  try:
    _export(args.repo, copy)
    if os.path.realpath(args.tests_from) != os.path.realpath(args.repo):
      shutil.rmtree(os.path.join(copy, "tests"))
      _export(args.tests_from, copy, "tests")
    mutants = [m for m in MUTANTS if not args.only or m.name in args.only]
    bad = problems(copy, mutants)
    if bad:
      sys.exit("the table does not match HEAD:\n  " + "\n  ".join(bad))
    for m in mutants:
      target = os.path.join(copy, m.path)
      text = _read(target)
      try:
        with open(target, "w", encoding="utf-8") as f:
          f.write(text.replace(m.old, m.new))
        code, first, secs, out = _pytest(copy, m.tests, args.n, args.timeout)
      finally:
        with open(target, "w", encoding="utf-8") as f:
          f.write(text)
      status = ("timeout" if code is None else "survived" if code == 0 else
                f"error (exit {code})" if code in (3, 4, 5) else "caught")
      if args.verbose or status.startswith("error"):
        print(out[-3000:], file=sys.stderr)
      print(f"{m.name}: {status} in {secs:.0f} s"
            + (f" by {first}" if first else ""), file=sys.stderr)
      rows.append(dict(m._asdict(), tests=list(m.tests), status=status,
                       caught=status == "caught", exit_code=code,
                       first_failure=first, seconds=round(secs, 1)))
    return rows
  finally:
    shutil.rmtree(copy, ignore_errors=True)


def table(rows: list[dict]) -> str:
  out = ["| mutant | file | models | caught by |", "|---|---|---|---|"]
  for r in rows:
    by = (f"`{r['first_failure'] or '?'}`" if r["caught"]
          else f"**{r['status']}**")
    out.append(f"| {r['name']} | `{r['path']}` | {r['why']} | {by} |")
  caught = sum(r["caught"] for r in rows)
  return "\n".join(out + ["", f"{caught} of {len(rows)} mutants caught."])


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--repo", default=REPO, help="the library (its HEAD)")
  p.add_argument("--tests-from", help="repo whose committed tests/ runs "
                 "(default: --repo)")
  p.add_argument("--only", type=lambda s: set(s.split(",")),
                 help="comma-separated mutant names")
  p.add_argument("--out", help="write the results here as JSON")
  p.add_argument("-n", type=int, default=1, help="pytest-xdist workers")
  p.add_argument("--timeout", type=float, default=1800,
                 help="seconds for one mutant's pytest run")
  p.add_argument("--check", action="store_true",
                 help="only check the table against --repo's files")
  p.add_argument("-v", "--verbose", action="store_true")
  args = p.parse_args(argv)
  args.tests_from = args.tests_from or args.repo
  unknown = sorted((args.only or set()) - {m.name for m in MUTANTS})
  if unknown:
    p.error(f"unknown mutants {unknown}; valid: "
            + ", ".join(m.name for m in MUTANTS))
  if args.check:
    bad = problems(args.repo)
    print("\n".join(bad) or f"{len(MUTANTS)} mutants match {args.repo}")
    return 1 if bad else 0
  rows = run(args)
  print(table(rows))
  if args.out:
    with open(args.out, "w", encoding="utf-8") as f:
      json.dump(rows, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
