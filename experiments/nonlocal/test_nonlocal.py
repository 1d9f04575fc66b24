"""The non-local study (experiments/nonlocal): its report regenerated from
a synthetic ``runs.csv``, its export probe, and the export and empty-study
paths of the engine on its declaration.

The report tests assert on the ``Verdict`` objects the rule gives
(confirmed where the fake runs agree with the paper, contradicted where
they disagree, not testable here where the budget is below the claim's,
inconclusive without runs) and on what the template fills from the runs;
the prose's own claims are the template's ``{{expect:...}}`` checks, held
against the committed runs by experiments/test_all_studies.py. Helpers:
softattn_studies/testing.py.
"""

import json
import os

import numpy as np
import pytest

import softattn_studies as studies
from softattn.runstate import FailureKind, State
from softattn.sweep import declaration
from softattn_studies import testing
from softattn_studies.template import TemplateError
from softattn_studies.testing import EXPERIMENTS, regenerate, synthetic


def test_nonlocal_from_csv(tmp_path):
  study = testing.load_study("nonlocal")
  nl = "model.nl_blocks."

  def fill(run):
    heads, block = run.get(nl + "heads"), run.get(nl + "normalizer")
    acc = 0.80 if heads == 0 else (0.85 if block == "softmax" else 0.87)
    if run.get(nl + "mode") == "direction" and block == "softmax":
      acc -= 0.03
    if run.part == "embed_reduction" and block == "softmax":
      acc -= 0.02         # the embedding reduction costs NL only
    noise = [0.0, 0.004, -0.003, 0.002][run.seed]
    run.metrics["final/accuracy"] = acc + 0.01 * run.seed + noise * (
        block == "scaled")
    run.metrics["value/step_ms"] = 100.0 + (10 * heads if block == "softmax"
                                            else 0) + run.seed
    if run.part == "timing_32px":   # the step-time claims read these only
      run.metrics["value/step_ms"] = 500.0 + (40 * heads if block ==
                                              "softmax" else 0) + run.seed
    run.metrics["value/full_step_mb"] = 800.0 + (
        100 * heads if block == "softmax" else 80)
    run.metrics["value/vertical_ratio"] = (0.5 if block == "softmax" else
                                           1.0) + 0.01 * run.seed
    if heads == 4 and run.seed == 0 and run.get(nl + "init") == "normal":
      run.probes["attention_map"] = np.eye(8).tolist()
    # XLA's count: NL grows with heads, scaled NL shrinks (deterministic).
    run.flops_per_step = 3.3e9 + (
        1e7 * heads if block == "softmax" else 2e8 / max(heads, 1))
    if run.part.startswith("unscaled"):   # Sec. 3.1's block diverges
      run.state, run.kind, run.step = State.FAILED, FailureKind.NONFINITE, 9
      run.metrics = {}

  runs = synthetic(study, fill)
  he = [r for r in runs if r.part == "init_1ep" and r.seed == 3
        and r.get(nl + "init") == "he"]
  for r in he:        # two missing seeds of the focus part
    r.state, r.metrics = State.NOT_STARTED, {}
  v, out = regenerate(study, runs, tmp_path)
  assert v["t3.scaled_lt_nl.h4"].word == studies.CONFIRMED
  assert v["t3.scaled_lt_nl.h4"].estimate == pytest.approx(-2.0 - 0.1 / 3)
  assert v["t1.direction_hurts_nl_more"].word == studies.CONFIRMED
  # Fig. 2: pairs `embed_reduction` with `main`'s full-width blocks.
  embed = v["fig2.embed_reduction"]
  assert embed.word == studies.CONFIRMED and embed.n == 3, embed
  assert embed.estimate == pytest.approx(2.0)
  assert v["t3.nl_memory_grows"].word == studies.CONFIRMED
  assert v["t3.scaled_memory_flat"].word == studies.CONFIRMED
  assert v["t3.scaled_time_flat"].word == studies.CONFIRMED
  # Judged on the timing session (32x32 inputs), not on `main`'s times.
  assert v["t3.scaled_time_below_nl.h4"].estimate == pytest.approx(-160.0)
  assert v["t3.nl_time_grows"].estimate == pytest.approx(120.0)
  # The ordering exists at init: gated, whatever the trained ratios say.
  assert v["fig1.vertical_lines"].word == studies.NOT_TESTABLE
  assert "before training" in v["fig1.vertical_lines"].reason
  assert v["fig1.nl_vertical"].word == studies.NOT_TESTABLE
  # Sec. 3.1's divergence is an event over 164 epochs: a short run that
  # diverges counts (the unscaled block at the paper's map size: all 3),
  # one that does not is censored (every scaled run: not testable).
  unscaled = v["s31.unscaled_diverges"]
  assert unscaled.word == studies.CONFIRMED and unscaled.n == 3, unscaled
  never = v["s31.scaled_never_diverges"]
  assert never.word == studies.NOT_TESTABLE and "164" in never.reason, never
  for word in ("nl_memory_linear", "scaled_flops_flat",
               "scaled_time_below_nl.h4", "scaled_lt_nl.h4.1ep.paper"):
    assert v["t3." + word].word == studies.CONFIRMED, word
  # NL's FLOPs grow with heads by construction (only its per-head softmax
  # does): not a test, whatever the count (was confirmed before this was
  # declared).
  flops = v["t3.nl_flops_grow"]
  assert flops.word == studies.NOT_TESTABLE and "cannot fail" in flops.reason
  # The fakes' NL beats the network without NL blocks at 4 and 1 heads, so
  # the magnitude-only equivalences are judged (their precondition holds).
  assert v["t3.nl_helps"].word == studies.CONFIRMED
  assert v["sanity.nl_helps.h1"].word == studies.CONFIRMED
  for k in ("t1.magnitude_equal", "t1.magnitude_equal.h1"):
    assert v[k].word != studies.NOT_TESTABLE, (k, v[k])
  assert v["t3.scaled_lt_nl.h4.1ep.paper"].n == 3   # He seed 3 missing
  # NL's error does not depend on heads in the fakes.
  assert v["t3.heads_help_nl"].word == studies.INCONCLUSIVE
  for k in ("t2.scaled_lt_nl.he", "t2.scaled_lt_nl.he.h1"):
    assert v[k].word == studies.CONFIRMED, k
  assert v["t2.scaled_he_lt_zeros"].word == studies.INCONCLUSIVE
  # He and sigma 0.01 equal in the fakes: "sigma 0.01 beats He" is not shown.
  assert v["t2.nl_normal_beats_he"].word == studies.INCONCLUSIVE
  assert v["t2.nl_normal_beats_he"].n == 3    # seed 3 missing on one side
  assert v["t3.cifar100"].word == studies.NOT_TESTABLE
  # The paper's setting pairs runs across parts: NL at 1 head from `main`,
  # scaled NL with He at 1 head from `paper_defaults`.
  p1 = v["t3.scaled_lt_nl.h1.paper"]
  assert p1.word == studies.CONFIRMED and p1.n == 3
  assert v["t1.direction_hurts_nl.h1"].word == studies.CONFIRMED
  assert v["t1.direction_hurts_nl_more.h1"].word == studies.CONFIRMED
  text = (out / "RESULTS.md").read_text()
  assert "1 missing" in text and "(n=4)" in text
  assert "claims judged in both settings" in text
  fact = lambda name, rs=runs, ver=v: study.facts[name](rs, ver)
  # The sigma-0 seeds where NL and scaled NL reach the same error.
  assert ("in 0 of 3 seeds at 1 head and 0 of 3 seeds at 4 heads. With"
          in text)
  for r in runs:
    if r.get(nl + "init") == "zeros":
      r.metrics["final/accuracy"] = 0.8 + 0.01 * r.seed
  assert [fact(f"sigma0_same.h{h}") for h in (1, 4)] == ["3 of 3"] * 2
  # The prose says the 4-head comparison is contradicted at 300 steps; on
  # these runs it is confirmed, and the checked report says so.
  with pytest.raises(TemplateError, match=r"claim t3\.scaled_lt_nl\.h4 is "
                     "confirmed, the prose expects contradicted"):
    studies.study.report(study, str(tmp_path / "runs.csv"),
                         str(tmp_path / "checked"))
  # The unscaled runs that diverged, of those that ended, at both map
  # sizes; short runs that do not diverge are censored, not a contradiction.
  assert "  3/3 runs diverged; on 32x32 inputs" in text
  assert "  `unscaled_32px`) 3/3. Our runs are" in text
  diverged = lambda rs: studies.template.fill(
      "{{diverged:unscaled_32px}}", studies.template.Context(
          study.claims, {}, rs))
  for r in runs:
    if r.part.startswith("unscaled"):
      r.state, r.kind, r.metrics = State.DONE, None, {"final/accuracy": 0.8}
  # Inert NL blocks (the network without them as good): the magnitude-only
  # equivalences are untestable, by their precondition.
  for r in runs:
    if r.get(nl + "heads") == 0:
      r.metrics["final/accuracy"] = 0.90
  ver = studies.study.verdicts(study, runs)
  for k, pre in (("t1.magnitude_equal", "t3.nl_helps"),
                 ("t1.magnitude_equal.h1", "sanity.nl_helps.h1")):
    assert ver[k].word == studies.NOT_TESTABLE, (k, ver[k])
    assert f"precondition `{pre}`" in ver[k].reason, ver[k].reason
  assert ver["s31.unscaled_diverges"].word == studies.NOT_TESTABLE
  assert "every run is shorter" in ver["s31.unscaled_diverges"].reason
  assert diverged(runs) == "0/3"
  for png in ("table3_error.png", "attention_maps.png"):
    assert (out / png).exists()


def test_nonlocal_probe_memory_for_every_run_checkpoints_where_found(
    tmp_path):
  """The export probe's two halves: every run gets its full-scale memory
  row (from the committed cache; the unscaled block and Fig. 2's reduced
  embedding have none: the rows are of full-width blocks), and the
  attention probe reads only the checkpoints ``studies.probed`` finds
  (none here)."""
  study = testing.load_study("nonlocal")
  nl = "model.nl_blocks."
  runs = synthetic(study, lambda run: None)
  for r in runs:
    r.dir = str(tmp_path / r.name)
  study.probe(runs, os.path.join(EXPERIMENTS, "nonlocal"))
  with open(os.path.join(EXPERIMENTS, "nonlocal", "memory.json")) as f:
    mb = {(h, b): v for h, b, v in json.load(f)["mb"]}
  got = [r.metrics.get("value/full_step_mb") for r in runs]
  assert got == [None if r.get(nl + "embed_channels") else mb.get((
      r.get(nl + "heads"), "softmax" if not r.get(nl + "heads") else
      r.get(nl + "normalizer"))) for r in runs]
  assert any(r.get(nl + "embed_channels") for r in runs)
  assert None in got and len(set(got) - {None}) > 2
  assert not any(r.probes or "value/vertical_ratio" in r.metrics
                 for r in runs)


def test_study_with_no_runs_is_inconclusive_not_invented(tmp_path):
  study = testing.load_study("nonlocal")
  runs = synthetic(study, lambda r: None)
  for r in runs:
    r.state = State.NOT_STARTED
  v, out = regenerate(study, runs, tmp_path)
  assert {w.word for w in v.values()} == {studies.INCONCLUSIVE,
                                          studies.NOT_TESTABLE}
  assert "not run yet" in (out / "RESULTS.md").read_text()


def test_export_reads_status_fields_and_metrics(tmp_path):
  """``report.py --workdir`` path: status.json fields (state, kind, step,
  core_seconds, flops) and metrics.jsonl become runs.csv columns."""
  from softattn import runstate  # pylint: disable=g-import-not-at-top
  study = testing.load_study("nonlocal")
  names = [r.name for r in declaration.load(study.spec).runs]
  done, bad = (tmp_path / "w" / "main" / n for n in names[:2])
  for d in (done, bad):
    os.makedirs(d)
    with open(d / "metrics.jsonl", "w") as f:
      for s in (10, 20, 30):
        f.write(json.dumps({"step": s, "split": "train", "loss": 1.0 / s,
                            "accuracy": 0.5, "steps_per_sec": 5.0}) + "\n")
      f.write(json.dumps({"step": 30, "split": "eval", "accuracy": 0.8,
                          "loss": 0.4}) + "\n")
  runstate.write(str(done), runstate.Status(
      state=State.DONE, step=300, core_seconds=12.5, wall_seconds=30.0,
      flops_per_step=3e9))
  runstate.write(str(bad), runstate.Status(
      state=State.FAILED, kind=FailureKind.NONFINITE, step=40,
      message="loss=nan"))
  csv_path = str(tmp_path / "runs.csv")
  studies.export(study, str(tmp_path / "w"), csv_path, probe=False)
  # Parts may reuse run names (`unscaled` and `unscaled_32px`: seed-N).
  runs = {(r.part, r.name): r for r in studies.read_csv(csv_path)}
  names = [("main", n) for n in names]
  r = runs[names[0]]
  assert r.done and r.step == 300 and r.core_seconds == 12.5
  assert r.wall_s == 30.0   # the trainer's sum over attempts, not file times
  assert r.flops_per_step == 3e9 and r.value("final/accuracy") == 0.8
  assert r.value("best/accuracy") == 0.8 and r.epochs == pytest.approx(0.32)
  assert r.value("value/step_ms") == pytest.approx(200.0)
  assert runs[names[1]].diverged and runs[names[1]].step == 40
  assert runs[names[1]].value("final/accuracy") is None
  assert runs[names[2]].state == State.NOT_STARTED
  assert len(runs) == sum(len(declaration.load(
      f"{study.spec}:{a}" if a else study.spec).runs)
                          for a in study.all_parts().values())
