"""`sweep report` on synthetic run directories laid out like the training loop's."""

import csv
import json
import os

import numpy as np
import pytest

from softattn.sweep import __main__ as cli
from softattn.sweep import report as report_lib
from softattn.sweep import rundir

# Two normalizers, five model sizes each, errors on known power laws in FLOPs.
LAWS = {"softmax": (0.10, 40.0, 0.2), "relu_seqlen": (0.12, 80.0, 0.22)}
FLOPS_PER_STEP = [1e7, 4e7, 1.6e8, 6.4e8, 2.56e9]
STEPS = 1000


def _write(path, obj):
  with open(path, "w") as f:
    json.dump(obj, f)


def _make_run(sweep_dir, name, *, status=None, eval_acc=None, attempt=None,
              log=None, config=None):
  d = os.path.join(sweep_dir, name)
  os.makedirs(d)
  if status is not None:
    _write(os.path.join(d, "status.json"), status)
  if config is not None:
    _write(os.path.join(d, "config.json"), config)
  lines = [{"step": 0, "split": "info", "num_params": 1234},
           {"step": 10, "split": "train", "loss": 2.0, "accuracy": 0.99}]
  if eval_acc is not None:
    lines.append({"step": STEPS, "split": "eval", "accuracy": eval_acc,
                  "loss": 0.5})
  with open(os.path.join(d, "metrics.jsonl"), "w") as f:
    for line in lines:
      f.write(json.dumps(line) + "\n")
    f.write('{"step": 12, "split": "tra')  # torn by a kill: must be skipped
  if attempt is not None:
    _write(os.path.join(d, "sweep_attempt.json"), attempt)
  if log is not None:
    with open(os.path.join(d, "sweep.log"), "w") as f:
      f.write(log)


@pytest.fixture
def sweep_dir(tmp_path):
  root = str(tmp_path / "sweep")
  os.makedirs(root)
  runs = []
  for norm, (a, b, c) in LAWS.items():
    for i, fps in enumerate(FLOPS_PER_STEP):
      name = f"normalizer-{norm}__size-{i}"
      err = a + b * (fps * STEPS) ** -c
      # The loop's own spelling: final metrics keyed eval_<m>, and a train
      # accuracy that must not be mistaken for the eval one.
      _make_run(root, name, eval_acc=1 - err, status={
          "state": "done", "step": STEPS,
          "flops_per_step": fps, "core_seconds": 10.0 * (i + 1),
          "final": {"train_accuracy": 0.99, "eval_accuracy": 1 - err,
                    "step": STEPS}})
      runs.append({"name": name, "overrides": {"model.normalizer": norm,
                                               "model.width": 32 * (i + 1)}})
  bad = [
      ("nan", dict(status={"state": "failed", "kind": "nonfinite", "step": 41,
                           "message": "non-finite loss at step 41",
                           "flops_per_step": 1e7, "core_seconds": 3.0,
                           "final": {}})),
      ("crash", dict(attempt={"returncode": 1, "interrupted": False},
                     log="step 1\nTraceback ...\nRuntimeError: boom\n")),
      ("nan_acc", dict(status={"state": "done", "step": STEPS,
                               "flops_per_step": 1e7, "core_seconds": 1.0,
                               "final": {"eval_accuracy": float("nan")}})),
      ("cut", dict(status={"state": "running", "step": 30,
                           "flops_per_step": 1e7, "core_seconds": 1.0,
                           "final": {}})),
      ("never", {}),
  ]
  for name, kw in bad:
    runs.append({"name": name, "overrides": {"model.normalizer": "softmax",
                                             "model.width": 8}})
    if name != "never":
      _make_run(root, name, **kw)
  _write(os.path.join(root, rundir.MANIFEST),
         {"config": "x.py", "runs": runs})
  return root


def test_report_fits_each_normalizer_and_lists_every_run(sweep_dir):
  res = report_lib.report(sweep_dir)
  runs = {r.name: r for r in res["runs"]}
  assert len(runs) == 15
  for norm, (a, b, c) in LAWS.items():
    f = res["fits"][norm]["fit"]
    assert f is not None, res["fits"][norm]["reason"]
    np.testing.assert_allclose([f.a, f.b, f.c], [a, b, c], rtol=1e-3)
    assert res["fits"][norm]["n"] == 5  # failed softmax runs are not points
  run = runs["normalizer-softmax__size-2"]
  assert run.train_flops == pytest.approx(1.6e8 * STEPS)
  assert run.metrics["final/accuracy"] == pytest.approx(
      1 - (0.10 + 40 * 1.6e11 ** -0.2))

  states = {n: (runs[n].state, runs[n].kind, runs[n].message)
            for n in ("nan", "crash", "nan_acc", "cut", "never")}
  assert states["nan"] == ("failed", "nonfinite", "non-finite loss at step 41")
  assert runs["nan"].step == 41  # the field, not a number in the message
  assert states["crash"][:2] == ("failed", "exit")
  assert "exit code 1" in states["crash"][2] and "boom" in states["crash"][2]
  assert states["nan_acc"][:2] == ("failed", "nonfinite")
  assert "nan" in states["nan_acc"][2]
  assert states["cut"][:2] == ("running", None) and "30" in states["cut"][2]
  assert states["never"] == ("not_started", None, "never started")

  with open(os.path.join(sweep_dir, "results.csv")) as f:
    table = list(csv.DictReader(f))
  assert [r["run"] for r in table] == [r.name for r in res["runs"]]
  assert {r["run"]: r["state"] for r in table}["crash"] == "failed"
  md = open(os.path.join(sweep_dir, "results.md")).read()
  assert "| crash |" in md and "boom" in md and "| relu_seqlen | 5 |" in md
  assert "normalizer" in md.splitlines()[2]  # swept fields are columns
  fits = json.load(open(os.path.join(sweep_dir, "fits.json")))
  assert fits["fits"]["softmax"]["fit"]["c"] == pytest.approx(0.2, rel=1e-3)
  with open(os.path.join(sweep_dir, "scaling.png"), "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_too_few_points_is_reported_not_raised(sweep_dir, tmp_path):
  res = report_lib.report(sweep_dir, compute="core_seconds", plot=False,
                          out_dir=str(tmp_path / "out"))
  # core_seconds gives softmax 5 distinct values; group fits still work.
  assert res["fits"]["softmax"]["fit"] is not None
  runs = [r for r in res["runs"] if r.get("model.normalizer") ==
          "relu_seqlen"][:3]
  fits = report_lib.fit_groups(runs)
  assert fits["relu_seqlen"]["fit"] is None
  assert "at least 4" in fits["relu_seqlen"]["reason"]


def test_report_cli_prints_fits_and_failures(sweep_dir, capsys):
  assert cli.main(["report", sweep_dir, "--no_plot"]) == 0
  out = capsys.readouterr().out
  assert "softmax: a=0.1" in out
  assert "failed: crash: exit code 1" in out
  assert "running: cut" in out


def test_report_of_an_empty_directory_is_a_clear_error(tmp_path, capsys):
  assert cli.main(["report", str(tmp_path)]) == 2
  assert "no sweep.json" in capsys.readouterr().err


def test_report_names_runs_from_the_sweep_config_without_manifest(
    sweep_dir, tmp_path):
  # A sweep launched on TPU VMs and copied back has run directories only.
  os.remove(os.path.join(sweep_dir, rundir.MANIFEST))
  spec = tmp_path / "spec.py"
  spec.write_text(
      "import ml_collections\n"
      "from softattn.sweep import grid\n"
      "def get_config(arg=None):\n"
      "  return ml_collections.ConfigDict(dict(size=0, model=dict("
      "normalizer='softmax')))\n"
      "def get_sweep(arg=None):\n"
      "  return grid.product(grid.sweep('model.normalizer', "
      "['softmax', 'relu_seqlen']), grid.sweep('size', range(5)))\n")
  res = report_lib.report(sweep_dir, spec=str(spec), plot=False)
  assert [r.name for r in res["runs"]][:2] == [
      "normalizer-softmax__size-0", "normalizer-softmax__size-1"]
  assert len(res["runs"]) == 10 and res["runs"][3].get("size") == 3
  assert res["fits"]["relu_seqlen"]["fit"].c == pytest.approx(0.22, rel=1e-3)
  # Without the spec, every run-looking directory is a row all the same.
  runs, fields = report_lib.read_sweep(sweep_dir)
  assert len(runs) == 14 and fields == []  # "never" has no directory
  # No config.json to read the group from.
  assert {r.label("model.normalizer") for r in runs} == {"?"}
