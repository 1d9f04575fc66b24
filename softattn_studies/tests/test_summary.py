"""The covered-settings rule (one test over every setting a claim covers)
and the counts (softattn_studies.summary): registration, evidence and
kind split, the post hoc notes, phenomena counted as groups."""

import pytest

import softattn_studies as studies
from softattn.runstate import State
from softattn_studies import claims as C, preregistration as P, stats
from softattn_studies import summary as S


def run(part, seed, acc, steps=100):
  return studies.RunRecord(part=part, name=f"{part}-{seed}-{steps}",
                           overrides={"seed": seed, "total_steps": steps},
                           state=State.DONE, total_steps=steps,
                           metrics={"final/accuracy": acc})


def covered(relation=">", **kw):
  return studies.Claim(
      "c", "a > b early", "T", "x", studies.ACCURACY,
      {"part": "a", "total_steps": 200}, {"part": "b", "total_steps": 200},
      relation, covers=(("200 steps", {}), ("50 steps", {"total_steps": 50})),
      **kw)


def test_a_covered_claim_is_one_test_over_every_setting():
  # Gaps (points) per seed: at 200 steps +1.0, +1.1, +0.9 (significant on
  # its own); at 50 steps -0.5, +2.0, -1.0 (not). Each seed's mean over
  # the two settings decides, not the setting with the smaller p.
  gaps = {200: (1.0, 1.1, 0.9), 50: (-0.5, 2.0, -1.0)}
  runs = [r for steps, gs in gaps.items() for s, g in enumerate(gs)
          for r in (run("a", s, 0.5 + g / 100, steps), run("b", s, 0.5, steps))]
  alone = studies.judge(covered().at({}), [r for r in runs
                                            if r.total_steps == 200])
  assert alone.word == C.CONFIRMED
  v = studies.judge(covered(), runs)
  means = [(1.0 - 0.5) / 2, (1.1 + 2.0) / 2, (0.9 - 1.0) / 2]
  assert v.estimate == pytest.approx(sum(means) / 3)
  assert v.p == pytest.approx(stats.paired_t(means, "greater"))
  assert v.word == C.INCONCLUSIVE and v.budgets == (50, 200)
  assert "Pooled over the 2 covered settings" in v.reason
  assert "200 steps: confirmed" in v.reason


def test_covered_settings_with_opposite_labels_are_mixed():
  gaps = {200: (1.0, 1.1, 0.9), 50: (-1.0, -1.1, -0.9)}
  runs = [r for steps, gs in gaps.items() for s, g in enumerate(gs)
          for r in (run("a", s, 0.5 + g / 100, steps), run("b", s, 0.5, steps))]
  v = studies.judge(covered(), runs)
  assert v.word == C.INCONCLUSIVE and v.reason.startswith("mixed")


def test_sides_override_each_selection_on_its_own():
  c = studies.Claim("d", "deeper is better", "T", "x", studies.ACCURACY,
                    {"depth": 4}, {"depth": 1},
                    covers=(("4 vs 1", {}), ("8 vs 4", {"sides": (
                        {"depth": 8, "part": "deep"}, {"depth": 4})})))
  deep = c.at(c.covers[1][1])
  assert deep.lhs == {"depth": 8, "part": "deep"} and deep.rhs == {"depth": 4}
  with pytest.raises(ValueError, match="one per selection"):
    c.at({"sides": ({"depth": 8},)})
  # A declaration read back from JSON has string keys in its mappings.
  mapped = studies.Claim("m", "t", "T", "x", studies.ACCURACY,
                         {"heads": 8}, None, covers=(
                             ("8", {}), ("16", {"heads": {"8": 16}})))
  assert mapped.at(mapped.covers[1][1]).lhs == {"heads": 16}


CLAIMS = [
    studies.Claim("emp", "t", "T", "x", studies.ACCURACY, {"p": 1}),
    studies.Claim("det", "t", "T", "x", studies.ACCURACY, {"p": 1},
                  deterministic=True),
    studies.Claim("late", "t", "T", "x", studies.ACCURACY, {"p": 1}),
    studies.Claim("chk", "t", "T", "x", studies.ACCURACY, {"p": 1},
                  kind=studies.SANITY),
]


def _v(word):
  return C.Verdict(word, 1.0, (0.5, 1.5), 0.01, 3, "r")


VERDICTS = {"emp": _v(C.CONFIRMED), "det": _v(C.CONFIRMED),
            "late": _v(C.INCONCLUSIVE), "chk": _v(C.CONTRADICTED)}
REG = {"emp": {"status": P.PRE, "changed": [], "original": None},
       "det": {"status": P.POST, "changed": ["declared"], "original": None},
       "late": {"status": P.POST, "changed": ["margin", "relation"],
                "original": {"relation": "~"}, "first": None},
       "chk": {"status": P.PRE, "changed": [], "original": None}}


def test_counts_split_registration_evidence_and_kind():
  t = S.tally(CLAIMS, VERDICTS, REG, {"late": _v(C.CONTRADICTED)},
              {"one thing": ("emp", "late")})
  assert t.count() == 3 and t.count(studies.SANITY) == 1
  assert t.count(status_=P.PRE) == 1 and t.count(status_=P.POST) == 2
  assert t.count(status_=P.POST, evidence_=S.CONSTRUCTION,
                 word=C.CONFIRMED) == 1
  line = S.line(t)
  assert "pre-registered (1): 1 confirmed" in line
  assert ("post hoc (2): 1 inconclusive; by construction (memory, FLOP or "
          "parameter counts): 1 confirmed") in line
  assert "As first declared, 1 of the post hoc claims read: 1 " \
         "contradicted." in line
  assert "\"one thing\" (2 claims: 1 confirmed, 1 inconclusive)" in line
  assert "Sanity checks (1, not counted above): 1 contradicted." in line
  table = S.table([("s", t), ("none", None)])
  assert "| s | pre-registered | 1 | 0 | 0 | 0 | - | 1 |" in table
  assert "| s | post hoc | 0 | 0 | 1 | 0 | 1 confirmed | 2 |" in table
  assert "| none | no runs.csv yet |" in table
  # A claim with no registration entry is counted as not checked.
  assert S.tally(CLAIMS, VERDICTS).count(status_=S.UNCHECKED) == 3


def test_post_hoc_notes_say_what_changed_and_the_first_label():
  notes = S.notes(CLAIMS, REG, {"late": _v(C.CONTRADICTED)})
  assert set(notes) == {"det", "late"}
  assert notes["det"] == "*Post hoc*: declared after its data."
  assert notes["late"].startswith("*Post hoc*: its margin, relation changed "
                                  "after its data; as first declared "
                                  "(before its data): **contradicted**")


def test_the_original_verdict_is_the_first_declarations():
  runs = [run("a", s, 0.52 + 0.005 * s) for s in range(3)] + [
      run("b", s, 0.5) for s in range(3)]
  today = studies.Claim("x", "t", "T", "x", studies.ACCURACY, {"part": "a"},
                        {"part": "b"}, "<", target=5.0)
  first = P.declaration(studies.Claim("x", "t", "T", "x", studies.ACCURACY,
                                      {"part": "a"}, {"part": "b"}, "~",
                                      margin=1.0))
  reg = {"x": {"status": P.POST, "changed": ["relation"], "original": None,
               "first": first}}
  ver = studies.judge_all([today], runs)
  orig = S.original_verdicts([today], runs, ver, reg)["x"]
  assert ver["x"].word == C.CONFIRMED       # 2, 2.5, 3 points: below 5
  assert orig.word == C.CONTRADICTED        # ... and beyond ±1


def test_a_study_has_one_colour_per_setting_across_its_figures():
  from softattn_studies import plotspec as PS  # noqa: PLC0415
  sel = {"part": "a"}
  one = PS.Plot("one", [PS.Points("p", studies.ACCURACY, "x",
                                  {"sm": [(1, sel)], "nsm": [(1, sel)]})])
  two = PS.Plot("two", [PS.Points("q", studies.ACCURACY, "x",
                                  {"nsm": [(1, sel)], "relu": [(1, sel)]}),
                        PS.Paired("d", {"nsm - sm": "c", "other": "c"}, "y")])
  colors = PS.palette([one, two])
  assert len({colors["sm"], colors["nsm"], colors["relu"],
              colors["other"]}) == 4
  assert colors["nsm - sm"] == colors["nsm"]      # the setting it names
  # Each figure alone would start its palette over: nsm would change colour.
  assert PS.palette(two)["nsm"] != colors["nsm"]
  many = PS.Plot("many", [PS.Points("p", studies.ACCURACY, "x", {
      f"s{i}": [(1, sel)] for i in range(len(PS.COLORS) + 1)})])
  with pytest.raises(ValueError, match="distinct colours"):
    PS.palette(many)


def test_a_paired_panel_shows_every_covered_setting_and_the_pooled_values():
  from softattn_studies import plotspec as PS, plots  # noqa: PLC0415
  runs = [r for steps in (50, 200) for s in range(3) for r in (
      run("a", s, 0.51 + 0.01 * s, steps), run("b", s, 0.5, steps))]
  c = covered()
  fig, axes = plots.subplots(1, 1)
  ax = axes.reshape(-1)[0]
  drawn = PS._paired(ax, PS.Paired("d", {"a - b": "c"}, "y"), runs,
                     {"a - b": "C0"}, {"c": c})
  ticks = [t.get_text() for t in ax.get_xticklabels()]
  plots.pyplot().close(fig)
  assert drawn == 3 and ticks == ["a - b: 200 steps (n=3)",
                                  "a - b: 50 steps (n=3)",
                                  "a - b: all, per-seed mean (n=3)"]
