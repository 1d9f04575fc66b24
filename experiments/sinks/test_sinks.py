"""The sinks study (experiments/sinks): its declarations build, its sink
summary counts what claims.py declares, and its report regenerates from a
synthetic ``runs.csv``.

The report test asserts on the ``Verdict`` objects the rule gives; what the
prose says of the committed runs is the template's own business (it has no
``{{expect:...}}`` until there are runs). Helpers:
softattn_studies/testing.py.
"""

import json

import pytest

import softattn_studies as studies
from softattn import configlib, normalizers
from softattn.sweep import declaration
from softattn_studies import testing
from softattn_studies.testing import regenerate, synthetic

SWEEP = "experiments/sinks/sweep.py"


@pytest.mark.parametrize("arg", ["", "output_gate=headwise", "scale=full",
                                 "scale=full,output_gate=headwise"])
def test_every_declared_config_builds(arg):
  sweep = declaration.load(f"{SWEEP}:{arg}" if arg else SWEEP)
  assert len(sweep.runs) == (3 if "gate" in arg else 21)
  built = set()
  for run in sweep.runs:
    cfg = run.config
    configlib.check_keys(cfg)
    normalizers.get(cfg.model.normalizer)
    assert cfg.diagnostics and cfg.model.pool == "tok"
    assert cfg.model.output_gate == ("headwise" if "gate" in arg else None)
    key = json.dumps(cfg.model.to_dict(), sort_keys=True, default=repr)
    if key not in built:
      built.add(key)
      assert studies.param_count(studies.build_abstract(cfg)[1]) > 0
  # The registers variant and the others differ in nothing else.
  assert len(built) == (1 if "gate" in arg else 7)


def test_parts_and_claims_are_declared_once():
  study = testing.load_study("sinks")
  assert study.all_parts() == {"main": "", "gate": "output_gate=headwise"}
  claims = testing.module("sinks/claims.py")
  for c in study.claims:
    assert c.budget is not None and len(c.budget.why) > 20, c.id
    assert c.budget.steps == (claims.STEPS,), c.id
  # Every selection picks runs the sweep declares.
  runs = synthetic(study, lambda r: None)
  for v in claims.VARIANTS:
    assert len(studies.select(runs, claims.sel(v))) == 3, v


def _stats(share, vratio=1.0, erank=3.0, register=0.0, norms=(10.0, 9.0)):
  """A ``summarize_sinks`` dict: 2 layers x 2 heads, head 0 of layer 1 as
  given, the others uniform; 2 blocks."""
  out = {}
  for layer in (0, 1):
    for h in (0, 1):
      sink = layer == 1 and h == 0
      p = f"T/encoderblock_{layer}/MultiHeadDotProductAttention_0/h{h}/"
      out.update({p + "top_key_share": share if sink else 0.05,
                  p + "top_key_vnorm_ratio": vratio if sink else 1.0,
                  p + "out_erank": erank if sink else 3.0,
                  p + "top_key_register": register if sink else 0.0})
    b = f"T/encoderblock_{layer}/"
    mx, med = norms if layer == 1 else (5.0, 5.0)
    out.update({b + "token_norm_max": mx, b + "token_norm_median": med,
                b + "token_norm_max_patch": 0.25 * (layer + 1)})
  return out


def test_summary_counts_the_declared_thresholds():
  probes = testing.module("sinks/probes.py")
  none = probes.summarize(_stats(0.2))
  assert none["sink_heads"] == 0 and none["has_sink"] == 0
  noop = probes.summarize(_stats(0.6, vratio=0.1))
  assert noop["sink_heads"] == noop["noop_heads"] == 0.25
  assert noop["has_noop"] == 1 and noop["has_broadcast"] == 0
  broad = probes.summarize(_stats(0.6, erank=1.1))
  assert broad["broadcast_token_heads"] == 0.25 and broad["noop_heads"] == 0
  # A broadcast sink on a register is absorbed: counted as broadcast, not
  # as one on a token.
  absorbed = probes.summarize(_stats(0.6, erank=1.1, register=1.0))
  assert absorbed["has_broadcast"] == 1
  assert absorbed["broadcast_token_heads"] == 0
  high = probes.summarize(_stats(0.2, norms=(30.0, 10.0)))
  assert high["norm_ratio"] == 3.0 and high["has_high_norm"] == 1
  assert high["top_norm_patch"] == 0.5        # the last block's
  assert probes.summarize({}) == {}


def test_sinks_from_csv(tmp_path):
  study = testing.load_study("sinks")
  claims = testing.module("sinks/claims.py")
  gated = claims.sel("gate")

  def fill(run):
    """softmax forms every kind of sink and high-norm tokens; the gate and
    registers remove what the papers say; relu/n and sigmoid form none but
    softpick does; the n-dependent normalizers lose less at 196 tokens
    (ssmax more at 100)."""
    n = run.get("model.normalizer")
    regs, gate = run.get("model.num_registers"), run.part == gated["part"]
    noise = [0.0, 0.01, -0.01][run.seed]
    sinks = 0.0 if n in ("relu_seqlen", "sigmoid") else 0.25 + noise
    if n == "softmax_sink":
      sinks = 0.1 + noise
    v = {"sink_heads": sinks, "has_sink": float(sinks > 0),
         "noop_heads": 0.0 if gate else sinks / 2, "has_noop": float(
             sinks > 0 and not gate),
         "broadcast_token_heads": 0.0 if regs else sinks / 2,
         "has_broadcast": float(sinks > 0), "norm_ratio": 3.0 + noise
         - (1.0 if n == "softpick" else 0.0), "has_high_norm": 1.0,
         "top_norm_patch": (0.2 if regs else 0.9) + noise}
    drop = {100: -0.2, 196: -0.4}
    if n in claims.N_DEPENDENT:
      drop = {100: -0.3 if n == "ssmax" else -0.15, 196: -0.3}
    for tokens, d in drop.items():
      v[f"n{tokens}/drop"] = d + noise
      v[f"n{tokens}/accuracy"] = 0.7 + d + noise
      v[f"n{tokens}/sink_heads"] = sinks
      v[f"n{tokens}/core_seconds"] = 30.0
    run.metrics.update({f"value/{k}": x for k, x in v.items()})
    run.metrics["final/accuracy"] = 0.7 + noise

  v, out = regenerate(study, synthetic(study, fill), tmp_path)
  for k in ("sinks", "noop", "broadcast", "high_norm"):
    assert v[f"sanity.softmax_{k}"].word == studies.CONFIRMED, k
  for cid in ("reg.high_norm_patch", "reg.broadcast", "gate.noop",
              "sink_logit.fewer", "softpick.no_massive",
              "nosink.relu_seqlen", "nosink.sigmoid"):
    assert v[cid].word == studies.CONFIRMED, (cid, v[cid])
  assert v["nosink.softpick"].word == studies.CONTRADICTED
  for norm in claims.N_DEPENDENT:
    assert v[f"transfer.{norm}.n196"].word == studies.CONFIRMED, norm
    assert v[f"transfer.{norm}.n196"].estimate == pytest.approx(10.0)
  assert v["transfer.ssmax.n100"].word == studies.CONTRADICTED
  assert v["transfer.relu_seqlen.n100"].word == studies.CONFIRMED
  for cid in ("darcet.large_models", "transfer.lssa"):
    assert v[cid].word == studies.NOT_TESTABLE, cid
  text = (out / "RESULTS.md").read_text()
  assert "top-key share > 0.3" in text
  assert "24 CPU core-minutes (48 evaluations)" in text
  assert (out / "transfer.png").exists()


def test_a_precondition_gates_the_claims_when_softmax_has_no_sinks(tmp_path):
  study = testing.load_study("sinks")

  def fill(run):
    run.metrics.update({"final/accuracy": 0.7, "value/has_sink": 0.0,
                        "value/sink_heads": 0.0})
  v, _ = regenerate(study, synthetic(study, fill), tmp_path)
  assert v["sanity.softmax_sinks"].word == studies.CONTRADICTED
  for cid in ("nosink.relu_seqlen", "nosink.softpick", "sink_logit.fewer"):
    assert v[cid].word == studies.NOT_TESTABLE, cid
    assert "sanity.softmax_sinks" in v[cid].reason
  # No transfer was recorded: judged on nothing, never refused.
  assert v["transfer.ssmax.n196"].word == studies.INCONCLUSIVE
