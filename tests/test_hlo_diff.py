"""benchmarks/hlo_diff.py: per-op bytes and the op-by-op difference, on HLO
text written here (the answer known by hand)."""

import importlib.util
import os

SPEC = importlib.util.spec_from_file_location(
    "hlo_diff", os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "benchmarks", "hlo_diff.py"))
hlo_diff = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(hlo_diff)

COMMON = """\
HloModule m

%fused.1 (p: f32[8,128]) -> f32[8] {
  %p = f32[8,128]{1,0} parameter(0)
  ROOT %r = f32[8]{0} reduce(%p, %z), dimensions={1}, to_apply=%add
}

ENTRY %main (x: f32[8,128], y: bf16[128,64]) -> f32[8,64] {
  %x = f32[8,128]{1,0:T(8,128)} parameter(0)
  %y = bf16[128,64]{1,0} parameter(1)
  %c = f32[] constant(0)
  %dot = f32[8,64]{1,0} fusion(%x, %y), kind=kOutput, calls=%fused.1, metadata={op_name="jit(f)/dot_general"}
"""
EXTRA = """\
  %two = (f32[8]{0}, f32[8,128]{1,0}) fusion(%x), kind=kLoop, calls=%fused.1, metadata={op_name="jit(f)/reduce_sum"}
  %g = f32[8]{0} get-tuple-element(%two), index=0
"""
END = "  ROOT %out = f32[8,64]{1,0} add(%dot, %dot)\n}\n"


def test_ops_charge_operands_and_results_and_skip_free_ops():
  ops = {o["name"]: o for o in hlo_diff.ops(COMMON + EXTRA + END)}
  assert set(ops) == {"dot", "two", "out"}   # parameters, constant, gte: free
  assert ops["dot"]["bytes"] == 8 * 128 * 4 + 128 * 64 * 2 + 8 * 64 * 4
  # A tuple result counts each element; the operand its one array.
  assert ops["two"]["bytes"] == (8 * 4 + 8 * 128 * 4) + 8 * 128 * 4
  assert ops["two"]["op"] == "fusion:kLoop"
  assert ops["two"]["result"] == "(f32[8], f32[8,128])"
  assert ops["out"]["bytes"] == 3 * 8 * 64 * 4


def test_diff_names_the_op_only_one_program_has():
  a, b = hlo_diff.ops(COMMON + END), hlo_diff.ops(COMMON + EXTRA + END)
  text = hlo_diff.diff(a, b, top=1)
  lines = text.splitlines()
  extra = (8 * 4 + 8 * 128 * 4) + 8 * 128 * 4
  assert lines[0] == (f"total GB: a {sum(o['bytes'] for o in a) / 1e9:.3f}, "
                      f"b {sum(o['bytes'] for o in b) / 1e9:.3f}")
  assert lines[2].split()[0] == f"+{extra / 1e6:.1f}"
  assert "(0, 1)  fusion:kLoop" in lines[2] and "reduce_sum" in lines[2]
