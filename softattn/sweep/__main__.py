"""``python -m softattn.sweep run|launch|report`` (``--help`` on each).

  run SPEC --workdir DIR [--parallel N]   run the grid here (resumable)
  run SPEC1 SPEC2 --workdir D1 --workdir D2 --parallel N
                                           several sweeps from one pool
  launch SPEC --workdir gs://... --tpu NAME --zone Z --print
                                           print one TPU-VM command per run
  report DIR                               table, fits and plot of a sweep

SPEC is a sweep config ``path.py[:arg]`` (see ``softattn.sweep.declaration``).
"""

from __future__ import annotations

import argparse
import shlex
import sys

from softattn import runstate
from softattn.sweep import declaration
from softattn.sweep import fit as fit_lib


def _add_sweep_args(p: argparse.ArgumentParser, many: bool = False) -> None:
  if many:
    p.add_argument("spec", nargs="+",
                   help="sweep config(s): path.py[:arg]; several share one "
                        "pool of --parallel slots, one --workdir each")
    p.add_argument("--workdir", required=True, action="append",
                   help="sweep directory; run R goes to WORKDIR/R (once per "
                        "SPEC, in the same order)")
  else:
    p.add_argument("spec", help="sweep config: path.py[:arg]")
    p.add_argument("--workdir", required=True,
                   help="sweep directory; run R goes to WORKDIR/R")
  p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                 help="override a field in every run (repeatable), e.g. "
                      "--set total_steps=10 for a smoke test")
  p.add_argument("--only", action="append", default=[], metavar="GLOB",
                 help="only runs whose names match (repeatable), e.g. "
                      "--only '*normalizer-softmax*'")


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog="python -m softattn.sweep",
                                   description=__doc__.split("\n")[0])
  sub = parser.add_subparsers(dest="command", required=True)

  run = sub.add_parser("run", help="run the sweep(s) locally")
  _add_sweep_args(run, many=True)
  run.add_argument("--parallel", type=int, default=1,
                   help="runs at once (default 1)")
  run.add_argument("--retry_failed", action="store_true",
                   help="rerun runs that failed before (default: skip them)")
  run.add_argument("--dry_run", action="store_true",
                   help="print each run's state and command; run nothing")
  run.add_argument("--mock_data", action="store_true",
                   help="train on tfds.testing.mock_data (smoke tests)")
  run.add_argument("--launcher", default=None,
                   help="command prefix instead of 'python -m softattn.main'")
  run.add_argument("--skip_checks", action="store_true",
                   help="do not run the training loop's config checks on "
                        "every run before starting (needed when a custom "
                        "--launcher trains something else)")

  launch = sub.add_parser("launch", help="print TPU-VM launch commands")
  _add_sweep_args(launch)
  launch.add_argument("--print", dest="print_", action="store_true",
                      help="print the commands (the only mode: softattn "
                           "never calls a cloud itself)")
  launch.add_argument("--tpu", required=True, help="TPU VM name")
  launch.add_argument("--zone", required=True)
  launch.add_argument("--project", default=None)
  launch.add_argument("--repo_dir", default="~/softattn",
                      help="softattn checkout on the VM hosts")
  launch.add_argument("--python", default="python3")
  launch.add_argument("--env", action="append", default=[],
                      metavar="NAME=VALUE", help="environment for the run")
  launch.add_argument("--gcloud_arg", action="append", default=[],
                      help="extra argument for gcloud ... ssh (repeatable)")

  report = sub.add_parser("report", help="table, fits and plot of a sweep")
  report.add_argument("sweep_dir")
  report.add_argument("--out", default=None,
                      help="output directory (default: SWEEP_DIR)")
  report.add_argument("--metric", default="accuracy",
                      help="final eval metric; error = 1 - metric")
  report.add_argument("--group_by", default="model.normalizer",
                      help="config field giving one curve per value")
  report.add_argument("--compute", default="flops",
                      choices=["flops", "core_seconds"])
  report.add_argument("--no_plot", action="store_true")
  report.add_argument("--sweep", default=None, metavar="SPEC",
                      help="sweep config naming the runs, for a sweep "
                           "directory without sweep.json (e.g. copied back "
                           "from a TPU VM's bucket)")
  return parser


def _run(args) -> int:
  from softattn import paths  # pylint: disable=g-import-not-at-top
  from softattn.sweep import rundir, runner  # pylint: disable=g-import-not-at-top
  if len(args.workdir) != len(args.spec):
    raise declaration.SweepError(
        f"{len(args.spec)} sweep(s) and {len(args.workdir)} --workdir(s); "
        "give one --workdir per SPEC, in the same order")
  jobs = [(declaration.load(spec, extra=args.set), workdir)
          for spec, workdir in zip(args.spec, args.workdir)]
  if args.launcher:
    launcher = shlex.split(args.launcher)
  elif args.mock_data:
    launcher = [sys.executable, "-m", "softattn.sweep.mock_main"]
  else:
    launcher = runner.default_launcher()
  if not args.skip_checks:
    for sweep, _ in jobs:
      runner.preflight(sweep, mock_data=args.mock_data)
  if args.dry_run:
    chosen = declaration.select_all([sw for sw, _ in jobs], args.only)
    for (sweep, workdir), runs in zip(jobs, chosen):
      for r in runs:
        state = rundir.run_state(paths.join(workdir, r.name))
        live = f" ({state.reason})" if state.live else ""
        print(f"# {r.name}: {state.state}{live}")
        print(shlex.join([*launcher, *declaration.main_args(
            sweep, r, workdir)]))
    return 0
  outcome = runner.run_sweeps(jobs, parallel=args.parallel,
                              retry_failed=args.retry_failed,
                              only=args.only, launcher=launcher)
  counts = {}
  for state in outcome.values():
    counts[state] = counts.get(state, 0) + 1
  dirs = " ".join(args.workdir)
  print("sweep: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        + (f"; `python -m softattn.sweep report {dirs}` tabulates it"
           if len(args.workdir) == 1 else
           f"; `python -m softattn.sweep report DIR` tabulates each of {dirs}"))
  return 0 if all(s == runstate.State.DONE for s in outcome.values()) else 1


def _launch(args) -> int:
  from softattn.sweep import launch  # pylint: disable=g-import-not-at-top
  if not args.print_:
    print("error: launch only prints commands (softattn never calls a cloud); "
          "add --print and run the lines it prints.", file=sys.stderr)
    return 2
  sweep = declaration.load(args.spec, extra=args.set)
  lines = launch.tpu_commands(
      sweep, tpu=args.tpu, zone=args.zone, project=args.project,
      workdir=args.workdir, repo_dir=args.repo_dir, python=args.python,
      env=args.env, gcloud_args=args.gcloud_arg, only=args.only)
  print(f"# {len(lines)} run(s) of {sweep.config_flag} on TPU VM {args.tpu}; "
        "each uses the whole slice, so run them one after another.")
  if sweep.base.get("multihost", None) is False and not any(
      r.config.get("multihost", False) for r in sweep.runs):
    print("# config.multihost is False: fine on a single-host slice (v4-8); "
          "for more hosts add --set multihost=true so each host joins "
          "jax.distributed.")
  for line in lines:
    print(line)
  return 0


def _report(args) -> int:
  from softattn import paths  # pylint: disable=g-import-not-at-top
  from softattn.sweep import report  # pylint: disable=g-import-not-at-top
  res = report.report(args.sweep_dir, out_dir=args.out, metric=args.metric,
                      group_by=args.group_by, compute=args.compute,
                      plot=not args.no_plot, spec=args.sweep)
  for path in res["files"]:
    print(f"wrote {path}")
  for group, r in res["fits"].items():
    f = r["fit"]
    print(f"{group}: " + (f.summary() if f is not None else
                          f"no fit ({r['reason']})"))
  for run in res["runs"]:
    if run.state != runstate.State.DONE:
      print(f"{run.state}: {run.name}: {run.message}")
  for run, bad in res["unparsable"].items():
    print(f"warning: {run}: {paths.describe_unparsable(bad)}",
          file=sys.stderr)
  return 0


def main(argv=None) -> int:
  args = _parser().parse_args(argv)
  try:
    return {"run": _run, "launch": _launch, "report": _report}[args.command](
        args)
  except (declaration.SweepError, fit_lib.FitError, FileNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  except KeyboardInterrupt:
    print("interrupted; `sweep run` again resumes the unfinished runs",
          file=sys.stderr)
    return 130


if __name__ == "__main__":
  sys.exit(main())
