"""The verdict rule (softattn_studies.claims) on synthetic run records.

Edge cases of the stated rule: fewer than 3 pairs is inconclusive,
below-budget is "not testable here" with the reason, equivalence by TOST
inside / outside the margin, a diverged run (kind nonfinite) left out and
named, one-sided tests where the direction matters; runs.csv round trip;
plots refuse unlabelled axes; the checkpoint loop every study's probe
runs (``probed``). That the library never imports the studies is
tests/test_layers.py's.
"""

import dataclasses
import os

import numpy as np
import pytest

import softattn_studies as studies
from softattn.runstate import FailureKind, State
from softattn_studies import claims as C, plots, stats


def run(part, seed, acc, state=State.DONE, kind=None, step=100, epochs=1.0,
        **fields):
  metrics = {} if acc is None else {"final/accuracy": acc}
  return studies.RunRecord(part=part, name=f"{part}-{seed}",
                           overrides={"seed": seed, **fields}, state=state,
                           kind=kind, step=step, epochs=epochs,
                           metrics=metrics)


def pair_runs(a_accs, b_accs, **kw):
  return ([run("a", s, x, **kw) for s, x in enumerate(a_accs)] +
          [run("b", s, x, **kw) for s, x in enumerate(b_accs)])


def claim(relation=">", **kw):
  return studies.Claim("c", "a vs b", "T1", "1 vs 2", studies.ACCURACY,
                       lhs={"part": "a"}, rhs={"part": "b"},
                       relation=relation, **kw)


def test_one_sided_direction_matters():
  runs = pair_runs([0.80, 0.83, 0.86], [0.79, 0.82, 0.85])   # a - b = 1 pt
  up = studies.judge(claim(">"), runs)
  down = studies.judge(claim("<"), runs)
  assert up.word == C.CONFIRMED and down.word == C.CONTRADICTED
  assert up.n == 3 and up.estimate == pytest.approx(1.0)
  assert up.p < 0.05 and up.ci[0] <= 1.0 <= up.ci[1]
  # A gap inside the seed-to-seed noise of the differences: inconclusive.
  noisy = pair_runs([0.80, 0.83, 0.86], [0.79, 0.84, 0.85])
  assert studies.judge(claim(">"), noisy).word == C.INCONCLUSIVE


def test_fewer_than_three_pairs_is_inconclusive_whatever_the_numbers():
  runs = pair_runs([0.90, 0.91], [0.10, 0.11])
  v = studies.judge(claim(">"), runs)
  assert v.word == C.INCONCLUSIVE and v.n == 2 and v.p is None
  assert "needs 3" in v.reason and v.estimate == pytest.approx(80.0)
  nothing = studies.judge(claim(">"), [])
  assert nothing.word == C.INCONCLUSIVE and "not run yet" in nothing.reason


def test_below_budget_is_not_testable_with_the_reason():
  runs = pair_runs([0.9] * 3, [0.1] * 3, epochs=0.4)
  c = claim(">", min_budget=(studies.paper_fraction(0.1, 100, "end of "
                                                    "training"),))
  v = studies.judge(c, runs)
  assert v.word == C.NOT_TESTABLE and v.estimate is None
  assert "10% of the paper's 100 epochs" in v.reason and "0.4" in v.reason
  enough = pair_runs([0.9, 0.91, 0.92], [0.1, 0.1, 0.1], epochs=10.0)
  assert studies.judge(c, enough).word == C.CONFIRMED
  never = claim(">", min_budget=(studies.unavailable("no CIFAR offline"),))
  assert studies.judge(never, enough).reason == "no CIFAR offline"
  # A measured condition: the attention weights moved from their init.
  moved = studies.Requirement("attention weights moved from init",
                              "value/moved", 0.05)
  for r in enough:
    r.metrics["value/moved"] = 0.01 if r.part == "a" else 0.5
  v = studies.judge(claim(">", min_budget=(moved,)), enough)
  assert v.word == C.NOT_TESTABLE and "value/moved >= 0.05" in v.reason
  # Finished runs that never recorded the condition cannot meet it.
  unmeasured = studies.Requirement("decay acted", "value/absent", 0.1)
  v = studies.judge(claim(">", min_budget=(unmeasured,)), enough)
  assert v.word == C.NOT_TESTABLE and "not measured" in v.reason
  # ``on``: the condition is measured on other runs than the claim's own
  # (e.g. the decay that an ablation without decay removes).
  elsewhere = studies.Requirement("attention weights moved from init",
                                  "value/moved", 0.05, on={"part": "b"})
  assert studies.judge(claim(">", min_budget=(elsewhere,)),
                       enough).word == C.CONFIRMED
  elsewhere = dataclasses.replace(elsewhere, on={"part": "a"})
  v = studies.judge(claim(">", min_budget=(elsewhere,)), enough)
  assert v.word == C.NOT_TESTABLE and "ours: 0.01" in v.reason


def test_equivalence_by_tost_inside_and_outside_the_margin():
  same = pair_runs([0.800, 0.830, 0.860], [0.799, 0.832, 0.858])
  v = studies.judge(claim("~", margin=1.0), same)
  assert v.word == C.CONFIRMED and "TOST" in v.reason
  far = pair_runs([0.80, 0.83, 0.86], [0.77, 0.80, 0.83])   # 3 points
  assert studies.judge(claim("~", margin=1.0), far).word == C.CONTRADICTED
  # Equal on average but too noisy to show it: not "confirmed".
  noisy = pair_runs([0.80, 0.83, 0.86], [0.77, 0.85, 0.87])
  v = studies.judge(claim("~", margin=1.0), noisy)
  assert v.word == C.INCONCLUSIVE
  # ... and the reason says the spread rules equivalence out at this n.
  assert "wider than the ±1 band, so 3 pairs cannot" in v.reason
  assert "wider than" not in studies.judge(claim("~", margin=10.0),
                                           noisy).reason
  with pytest.raises(ValueError, match="margin"):
    claim("~")


def test_diverged_run_is_left_out_and_named_and_counts_as_an_event():
  runs = pair_runs([0.80, 0.83, 0.86, 0.9], [0.79, 0.82, 0.85, 0.8])
  runs[1] = run("a", 1, None, state=State.FAILED, kind=FailureKind.NONFINITE,
                step=40)
  v = studies.judge(claim(">"), runs)
  assert v.n == 3 and "a/a-1 diverged at step 40" in v.reason
  # The event claim "a diverges" counts it (value/diverged per run).
  diverged = studies.Metric("diverged", "value/diverged")
  for r in runs:
    r.metrics["value/diverged"] = float(r.diverged)
  ev = studies.Claim("d", "a diverges", "T1", "NaN", diverged,
                     lhs={"part": "a"}, relation="all")
  got = studies.judge(ev, runs)
  assert got.word == C.INCONCLUSIVE and got.reason.startswith("1/4 runs")
  for r in runs:
    if r.part == "a":
      r.state, r.kind, r.metrics["value/diverged"] = (
          State.FAILED, FailureKind.NONFINITE, 1.0)
  assert studies.judge(ev, runs).word == C.CONFIRMED
  none = studies.Claim("n", "b never diverges", "T1", "-", diverged,
                       lhs={"part": "b"}, relation="none")
  assert studies.judge(none, runs).word == C.CONFIRMED


def test_event_needs_three_seeds_not_three_runs():
  # One seed at three depths is one draw of init and data order: the rule
  # asks for 3 seeds, so 3/3 of these is not evidence.
  broke = studies.Metric("broke down", "value/broke")
  one_seed = [run("a", 0, 0.1, depth=d) for d in (1, 2, 4)]
  for r in one_seed:
    r.metrics["value/broke"] = 1.0
  ev = studies.Claim("e", "a breaks down", "T2", "-", broke,
                     lhs={"part": "a"}, relation="all")
  v = studies.judge(ev, one_seed)
  assert v.word == C.INCONCLUSIVE and v.n == 3
  assert "3 seeds (these are from 1)" in v.reason
  three = [run("a", s, 0.1) for s in range(3)]
  for r in three:
    r.metrics["value/broke"] = 1.0
  assert studies.judge(ev, three).word == C.CONFIRMED


def test_precondition_gates_on_another_claims_verdict():
  # "a ~ b" means nothing when a sanity claim (here: "a beats c", i.e. the
  # part that should differ matters) is not confirmed first.
  runs = (pair_runs([0.800, 0.830, 0.860], [0.800, 0.831, 0.859]) +
          [run("c", s, x) for s, x in enumerate([0.80, 0.83, 0.86])])
  matters = studies.Claim("m", "a > c", "-", "-", studies.ACCURACY,
                          lhs={"part": "a"}, rhs={"part": "c"})
  gated = claim("~", margin=1.0, min_budget=(studies.precondition(
      "m", "a and b are equal by construction unless a beats c"),))
  v = studies.judge_all([matters, gated], runs)
  assert v["m"].word == C.INCONCLUSIVE
  assert v["c"].word == C.NOT_TESTABLE
  assert "precondition `m`: inconclusive" in v["c"].reason
  for r in runs:
    if r.part == "c":
      r.metrics["final/accuracy"] -= 0.05
  assert studies.judge_all([matters, gated], runs)["c"].word == C.CONFIRMED
  with pytest.raises(ValueError, match="declare it earlier"):
    studies.judge_all([gated, matters], runs)


def test_gap_of_gaps_ratio_and_deterministic_claims():
  runs = []
  for s in range(3):
    for part, acc in (("a1", 0.9), ("a0", 0.8), ("b1", 0.85), ("b0", 0.84)):
      runs.append(run(part, s, acc + 0.01 * s))
  gap = studies.Claim("g", "a gains more", "T", "-", studies.ACCURACY,
                      terms=((1, {"part": "a1"}), (-1, {"part": "a0"}),
                             (-1, {"part": "b1"}), (1, {"part": "b0"})))
  v = studies.judge(gap, runs)
  assert v.word == C.CONFIRMED and v.estimate == pytest.approx(9.0)
  for r in runs:
    r.metrics["value/mb"] = {"a1": 200.0, "a0": 100.0}.get(r.part, 1.0)
  mb = studies.Metric("memory MB", "value/mb")
  grows = studies.Claim("m", "memory doubles", "T3", "-", mb,
                        lhs={"part": "a1"}, rhs={"part": "a0"},
                        contrast="ratio", target=1.05, deterministic=True)
  v = studies.judge(grows, runs)
  assert v.word == C.CONFIRMED and v.estimate == pytest.approx(2.0)
  flat = studies.Claim("f", "flat", "T3", "-", mb, lhs={"part": "a1"},
                       rhs={"part": "a0"}, contrast="ratio", relation="~",
                       margin=0.05, deterministic=True)
  assert studies.judge(flat, runs).word == C.CONTRADICTED
  with pytest.raises(ValueError, match="pairing key"):
    studies.judge(claim(">"), runs + [run("a", 0, 0.5)] + [
        run("a", 0, 0.5)])


def test_per_step_metric_compares_runs_of_different_lengths():
  # a: 1 step of 300 core-seconds; b: 150 steps of 6 core-seconds each.
  runs = [dataclasses.replace(run("a", s, 0.5, step=1), core_seconds=300.0
                              + s) for s in range(3)] + [
      dataclasses.replace(run("b", s, 0.8, step=150), core_seconds=900.0)
      for s in range(3)]
  runs.append(dataclasses.replace(run("b", 3, 0.8, step=0),
                                  core_seconds=5.0))
  per = studies.Metric("core-s per step", "core_seconds", per="step")
  assert per.of(runs[0]) == pytest.approx(300.0)
  assert per.of(runs[3]) == pytest.approx(6.0)
  assert per.of(runs[-1]) is None          # no step: no rate, not inf
  total = dataclasses.replace(per, per=None)
  assert total.of(runs[3]) == pytest.approx(900.0)
  slower = studies.Claim("t", "a is 2x slower per step", "T", "-", per,
                         lhs={"part": "a"}, rhs={"part": "b"},
                         contrast="ratio", target=2.0)
  v = studies.judge(slower, runs)
  assert v.word == C.CONFIRMED and v.estimate == pytest.approx(50.0, 0.01)
  # The runs' totals would say the opposite (300 < 900 core-seconds).
  assert studies.judge(dataclasses.replace(slower, metric=total),
                       runs).word == C.CONTRADICTED


def test_merge_keeps_committed_runs_the_workdir_lacks():
  # A fresh machine's workdir holds only the newly run "b-1"; the committed
  # file has "a-0" and a stale "a-1" the workdir has since rerun.
  fresh = [run("a", 0, None, state=State.NOT_STARTED), run("a", 1, 0.7),
           run("b", 1, 0.6), run("b", 2, None, state=State.NOT_STARTED)]
  committed = [run("a", 0, 0.5), run("a", 1, 0.1), run("gone", 0, 0.3),
               run("b", 2, None, state=State.NOT_STARTED)]
  got = {r.name: r for r in studies.runs.merge(fresh, committed)}
  assert list(got) == ["a-0", "a-1", "b-1", "b-2"]      # declared runs only
  assert got["a-0"].metrics["final/accuracy"] == 0.5    # from the file
  assert got["a-1"].metrics["final/accuracy"] == 0.7    # the workdir wins
  assert got["b-2"].state == State.NOT_STARTED


def test_design_reads_budget_and_seeds_from_the_runs():
  runs = ([run("a", s, 0.5, epochs=0.32, depth=d)
           for s in range(3) for d in (1, 2)] +
          [run("b", s, 0.5, epochs=10.0) for s in range(2)] +
          [run("b", 2, 0.5, epochs=10.0, skip=False)])
  for r in runs:
    r.total_steps = 300 if r.part == "a" else 147
  R = studies.render
  assert R.steps(runs, {"part": "a"}) == "300"
  assert R.steps(runs) == "147/300" and R.steps(runs, {"part": "c"}) == "?"
  assert R.design(runs, {"part": "a"}) == "300 steps (0.32 epoch) x 3 seeds"
  # Settings that differ in seeds: the range; one seed: singular.
  assert R.design(runs, {"part": "b"}, length="epochs") == \
      "10 epochs x 1-2 seeds"
  assert R.design(runs, {"part": "b", "skip": False}, length="epochs") == \
      "10 epochs x 1 seed"
  assert R.design(runs, {"part": "c"}) == "not declared"


def test_stats_match_scipy_and_handle_zero_variance():
  from scipy import stats as sps
  d = [0.5, 1.5, 1.0, 2.0]
  assert stats.paired_t(d, "greater") == pytest.approx(
      sps.ttest_1samp(d, 0, alternative="greater").pvalue)
  assert stats.paired_t([1, 1, 1], "greater") == 0.0
  assert stats.paired_t([1, 1, 1], "less") == 1.0
  assert stats.tost([0.0, 0.0, 0.0], 1.0) == 0.0
  s = stats.summarize([1.0, 2.0, 3.0, None])
  assert s.n == 3 and s.ci == pytest.approx(
      sps.t.interval(0.95, 2, loc=2.0, scale=1.0 / np.sqrt(3)))


def test_runs_csv_round_trip(tmp_path):
  runs = pair_runs([0.8, 0.81, 0.82], [0.7, 0.71, 0.72])
  runs[0].series["train/loss"] = [[1, 2.0], [2, 1.5]]
  runs[0].probes["map"] = [[0.1, 0.9]]
  runs[1].state, runs[1].kind = State.FAILED, FailureKind.NONFINITE
  path = studies.write_csv(str(tmp_path / "runs.csv"), runs)
  back = studies.read_csv(path)
  assert [r.name for r in back] == [r.name for r in runs]
  assert back[1].diverged and back[1].step == 100
  assert back[0].curve("loss")[1].tolist() == [2.0, 1.5]
  assert back[0].probes == {"map": [[0.1, 0.9]]}
  assert [studies.judge(claim(">"), x).estimate for x in (runs, back)] == \
      pytest.approx([studies.judge(claim(">"), runs).estimate] * 2)
  # A cell read_csv could not read back fails the write, naming it.
  runs[2].probes["map"] = np.zeros((256, 256)).tolist()
  with pytest.raises(ValueError, match=r"run .* probes cell is [\d,]+ char"):
    studies.write_csv(str(tmp_path / "big.csv"), runs)
  assert not (tmp_path / "big.csv").exists()


def test_plots_refuse_an_unlabelled_axis(tmp_path):
  fig, axes = plots.subplots(2)
  for ax in axes[0]:
    ax.plot([0, 1], [0, 1])
    ax.set_xlabel("x")
  axes[0][0].set_ylabel("y")
  with pytest.raises(ValueError, match="panel 1"):
    plots.save(fig, str(tmp_path / "p.png"))


def test_summary_block_is_replaced_in_place():
  text = "# Studies\n\nintro\n"
  once = studies.render.replace_summary(text, "A")
  twice = studies.render.replace_summary(once, "B")
  assert "A" not in twice.split("intro")[0] and twice.count("B\n") == 1


def test_probed_reads_finished_runs_with_checkpoints_lowest_seed_first(
    tmp_path):
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top

  def with_checkpoint(seed, state=State.DONE, ckpt=True, **fields):
    r = run("a", seed, 0.5, state=state, **fields)
    r.dir = str(tmp_path / f"run{seed}")
    if ckpt:
      with ocp.CheckpointManager(os.path.join(r.dir, "checkpoints")) as m:
        m.save(3, args=ocp.args.StandardSave(
            {"params": {"w": np.full(2, seed, np.float32)}}))
    return r

  runs = [with_checkpoint(2), with_checkpoint(0, heads=4),
          with_checkpoint(1, state=State.FAILED),
          with_checkpoint(3, ckpt=False), with_checkpoint(4, heads=4)]
  got = [(r.seed, s["params"]["w"].tolist())
         for r, s in studies.probed(runs)]
  assert got == [(0, [0, 0]), (2, [2, 2]), (4, [4, 4])]
  kept = studies.probed(runs, keep=lambda r: r.get("heads") == 4)
  assert [r.seed for r, _ in kept] == [0, 4]


def _steps(runs, steps):
  for r in runs:
    r.total_steps = steps
  return runs


def test_pooled_settings_are_averaged_to_one_value_per_seed():
  # 3 seeds x 3 depths: each seed shares its init and data order across
  # depths, so the depths are not 9 independent pairs. Per-seed means of
  # a - b: +1.0, -0.5, +1.2 (in points).
  gaps = {0: (1.0, 1.1, 0.9), 1: (-0.5, -0.4, -0.6), 2: (1.2, 1.3, 1.1)}
  runs = []
  for s, gs in gaps.items():
    for d, g in zip((1, 2, 4), gs):
      runs += [run("a", s, 0.5 + g / 100, depth=d),
               run("b", s, 0.5, depth=d)]
  c = claim(">", pair_by=("depth", "seed"))
  pooled = np.array([g for gs in gaps.values() for g in gs])
  # Nine pooled pairs would call it significant ...
  assert stats.paired_t(pooled, "greater") < 0.05
  # ... the three seeds do not.
  v = studies.judge(c, runs)
  assert v.word == C.INCONCLUSIVE and v.n == 3
  assert v.estimate == pytest.approx(np.mean([1.0, -0.5, 1.2]))
  assert v.p == pytest.approx(stats.paired_t(np.array([1.0, -0.5, 1.2]),
                                             "greater"))
  assert "averaged within each seed (up to 3 settings" in v.reason
  assert C.pairs(c, runs)[0] == pytest.approx([1.0, -0.5, 1.2])
  # A pooled claim none of whose settings has run yet says so.
  nothing = studies.judge(c, [])
  assert nothing.word == C.INCONCLUSIVE and "not run yet" in nothing.reason


def test_a_pooled_table_cell_can_average_within_each_seed_first():
  from softattn_studies import render  # pylint: disable=g-import-not-at-top
  # 3 seeds x 3 depths; seed 2's depth 4 has not finished.
  accs = {0: (0.60, 0.62, 0.64), 1: (0.70, 0.72, 0.74), 2: (0.80, 0.82, None)}
  runs = [run("a", s, x, depth=d, **({} if x is not None else
                                     {"state": State.RUNNING}))
          for s, xs in accs.items() for d, x in zip((1, 2, 4), xs)]
  pooled = render.Cell({"part": "a"}, studies.ACCURACY).text(runs)
  per_seed = render.Cell({"part": "a"}, studies.ACCURACY,
                         per_seed=True).text(runs)
  assert pooled.endswith("(n=8, 1 missing)"), pooled
  # Seeds 0 and 1 (means 62 and 72), seed 2 missing: n counts seeds.
  s = stats.summarize([62.0, 72.0])
  assert per_seed == f"67.00 ± {s.half:.2f} (n=2, 1 missing)", per_seed


def test_a_budget_not_declared_is_refused_and_the_read_one_recorded():
  runs = _steps(pair_runs([0.80, 0.83, 0.86], [0.79, 0.82, 0.85]), 300)
  ok = studies.judge(claim(">", budget=studies.Budget((300,), "Table 1: "
                                                      "end points")), runs)
  assert ok.word == C.CONFIRMED and ok.budgets == (300,)
  with pytest.raises(ValueError, match=r"\[300\] steps, not in its "
                     r"declared budget \(1200,\)"):
    studies.judge(claim(">", budget=studies.Budget((1200,), "x")), runs)
  with pytest.raises(ValueError, match="needs its reason"):
    studies.Budget((300,), " ")


def test_with_budgets_first_row_wins_and_every_row_and_claim_match():
  cs = [claim(), dataclasses.replace(claim(), id="d.x")]
  early, rest = (studies.Budget((50,), "early"),
                 studies.Budget((300,), "end"))
  got = studies.with_budgets(cs, [("d.*", early), ("*", rest)])
  assert [c.budget for c in got] == [rest, early]
  with pytest.raises(ValueError, match="no budget row matches"):
    studies.with_budgets(cs, [("d.*", early)])
  with pytest.raises(ValueError, match="match no claim"):
    studies.with_budgets(cs, [("*", rest), ("zz.*", early)])


def test_covered_settings_with_opposite_labels_are_mixed():
  # Judged at depth 1 (a > b); depth 2 runs go the other way.
  runs = []
  for d, sign in ((1, 1), (2, -1), (4, 1)):
    for s, base in enumerate((0.80, 0.83, 0.86)):
      runs += [run("a", s, base + sign * 0.01, depth=d),
               run("b", s, base, depth=d)]
  covers = (("depth 1", {}), ("depth 2", {"depth": 2}),
            ("depth 4", {"depth": 4}))
  c = studies.Claim("c", "a > b", "T1", "-", studies.ACCURACY,
                    lhs={"part": "a", "depth": 1},
                    rhs={"part": "b", "depth": 1}, covers=covers)
  v = studies.judge(c, runs)
  assert v.word == C.INCONCLUSIVE and "mixed" in v.reason
  assert "depth 1: confirmed" in v.reason
  assert "depth 2: contradicted" in v.reason
  # Without the disagreeing setting the judged label stands, others shown.
  agree = studies.judge(dataclasses.replace(c, covers=covers[::2]), runs)
  assert agree.word == C.CONFIRMED and "depth 4: confirmed" in agree.reason
  with pytest.raises(ValueError, match="judged at first"):
    dataclasses.replace(c, covers=covers[1:])
  # A mapping override maps one selection's value, not every selection's.
  at = c.at({"part": {"a": "a2"}})
  assert at.lhs["part"] == "a2" and at.rhs["part"] == "b"


def test_events_pool_covered_settings_and_censor_short_runs_without_one():
  broke = studies.Metric("broke down", "value/broke")
  runs = []
  for part, epochs, flags in (("long", 1.0, (0, 0, 0)),
                              ("short", 0.3, (1, 1, 0))):
    for s, f in enumerate(flags):
      r = run(part, s, 0.1, epochs=epochs)
      r.metrics["value/broke"] = float(f)
      runs.append(r)
  early = studies.paper_fraction(1 / 50, 50, "early stages")
  ev = studies.Claim("e", "breaks down", "T2", "-", broke,
                     lhs={"part": "long"}, relation="all",
                     min_budget=(early,),
                     covers=(("1 epoch", {}), ("short", {"part": "short"})))
  # Judged at the long runs alone it would be contradicted (0/3); the
  # short runs' two break-downs count, their run without one is censored.
  assert studies.judge(dataclasses.replace(ev, covers=()), runs).word == \
      C.CONTRADICTED
  v = studies.judge(ev, runs)
  assert v.word == C.INCONCLUSIVE and v.n == 5
  assert "2/5 runs broke down: mixed" in v.reason
  assert "Censored (1" in v.reason and "short: 2/3" in v.reason
  # Only short runs, none with the event: not testable, with the reason.
  only = dataclasses.replace(ev, lhs={"part": "short", "seed": 2},
                             covers=())
  nt = studies.judge(only, runs)
  assert nt.word == C.NOT_TESTABLE and "early stages" in nt.reason


def test_step_ms_is_the_median_logged_step_without_compilation():
  r = run("a", 0, 0.5)
  # The first logged rate includes compilation: skipped.
  r.series["train/steps_per_sec"] = [[1, 0.5], [2, 10.0], [3, 20.0],
                                     [4, 40.0]]
  assert studies.step_ms(r) == pytest.approx(50.0)
  r.series["train/steps_per_sec"] = [[1, 0.0]]
  assert studies.step_ms(r) is None
  assert studies.step_ms(run("a", 1, None, state=State.FAILED)) is None


def test_per_layer_values_read_layers_shallowest_first():
  r = run("a", 0, 0.5)
  for layer, pts in (("block_10", [[1, 4.0], [2, 8.0]]),
                     ("block_2", [[1, 1.0], [2, 3.0]]),
                     ("block_3", [[1, 5.0]])):     # one point: not a curve
    r.series[f"train/diag/{layer}/score_std"] = pts
  got = studies.layer_curves(r, "score_std", min_points=2)
  assert [v.tolist() for v in got] == [[1.0, 3.0], [4.0, 8.0]]
  assert len(studies.layer_curves(r, "score_std")) == 3
  assert studies.per_layer("score_std")(r) == pytest.approx((2 + 6 + 5) / 3)
  growth = studies.per_layer("score_std", lambda v: v[-1] / v[0], 2)
  assert growth(r) == pytest.approx((3 + 2) / 2)
  # Layers where fn gives None are left out; none left: None.
  assert studies.per_layer("score_std", lambda v: None)(r) is None
  r.state = State.FAILED
  assert studies.layer_curves(r, "score_std") == []
  assert studies.per_layer("score_std")(r) is None


def test_diverged_or_below_counts_divergence_and_low_ends():
  low = studies.diverged_or_below("final/accuracy", 0.15)
  assert [low(run("a", 0, x)) for x in (0.1, 0.5)] == [1.0, 0.0]
  assert low(run("a", 0, None, state=State.FAILED,
                 kind=FailureKind.NONFINITE)) == 1.0
  assert low(run("a", 0, None, state=State.RUNNING)) is None
  per_run = studies.diverged_or_below("final/accuracy",
                                      lambda r: 0.2 * r.seed)
  assert [per_run(run("a", s, 0.3)) for s in (1, 2)] == [0.0, 1.0]


def test_config_probes_count_parameters_and_plan_train_step_memory():
  from softattn.sweep import declaration  # pylint: disable=g-import-not-at-top
  # The element-wise study's attention-free baseline: a linear classifier
  # on 28x28 pixels, 10 classes.
  cfg = declaration.load("experiments/elementwise/sweep.py:part=models,"
                         "variants=B,extras=false,layers=0").runs[0].config
  assert studies.model_params(cfg) == 28 * 28 * 10 + 10
  small, large = (studies.train_step_memory_mb(cfg, b) for b in (4, 64))
  assert 0 < small < large


def test_load_images_takes_the_first_examples_of_a_sliced_split():
  """A run's eval split may carry a slice already ("test[:1000]": the
  nonlocal timing part); the probes' images are its first ``n``."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  config = ml_collections.ConfigDict({"data": {
      "name": "fashion_mnist", "pp_eval": "value_range(-1, 1)"}})
  with tfds.testing.mock_data(num_examples=8):
    x, y = studies.load_images(config, "test[:6]", 3)
    x_all, y_all = studies.load_images(config, "test", 3)
  assert x.shape == (3, 28, 28, 1) and y.shape == (3,)
  assert np.array_equal(x, x_all) and np.array_equal(y, y_all)
  assert x.min() >= -1.0 and x.max() <= 1.0
