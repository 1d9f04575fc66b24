"""TPU topology names -> get_topology_desc arguments, chip table, abstract devices."""

import pytest

from softattn import topology
from tests import libtpu_required


@pytest.mark.parametrize("name, libtpu_name, chips", [
    # v4/v5p count TensorCores (2 per chip); v5e/v6e count chips.
    ("v4-8", "v4:2x2x1", 4),
    ("v4-32", "v4:2x2x4", 16),
    ("v4-128", "v4:4x4x4", 64),
    ("v4-384", "v4:4x4x12", 192),
    ("v5p-128", "v5:4x4x4", 64),
    ("v5p-1280", "v5:4x8x20", 640),
    ("v5p-2560", "v5:8x8x20", 1280),
    ("v5p-6272", "v5:4x28x28", 3136),
    ("v5e-4", "v5e:2x2", 4),
    ("v5litepod-8", "v5e:2x4", 8),
    ("v5e-256", "v5e:16x16", 256),
    ("v6e-128", "v6e:8x16", 128),
    ("V5E:2x2", "v5e:2x2", 4),
])
def test_names_map_to_libtpu_topologies(name, libtpu_name, chips):
  t = topology.parse(name)
  assert t.topology_name == libtpu_name
  assert t.num_chips == chips


def test_megacore_wrap_and_host_bounds_follow_the_slice():
  assert topology.parse("v4-32").desc_kwargs()["chip_config_name"] == "megacore"
  assert topology.parse("v5e-32").desc_kwargs()["chip_config_name"] == "default"
  # Whole 4x4x4 cubes close into a 3D torus; smaller v4 slices do not.
  assert topology.parse("v4-128").wrap == (True, True, True)
  assert topology.parse("v4-64").wrap == (False, False, False)
  # A 2D slice wraps only along a full 16-chip side.
  assert topology.parse("v5e-128").wrap == (False, True, False)
  assert topology.parse("v5e-256").wrap == (True, True, False)
  assert topology.parse("v5e-1").chips_per_host_bounds == (1, 1, 1)
  assert topology.parse("v6e-64").chips_per_host_bounds == (2, 2, 1)


def test_multislice_prefix():
  t = topology.parse("2xv5e-256")
  assert t.num_slices == 2 and t.num_chips == 512
  assert t.desc_kwargs()["num_slices"] == 2


@pytest.mark.parametrize("bad", ["v5e-3", "v4-33", "v4-96", "v7-8", "tpu",
                                 "v5e:2x2x2", "v4:2x2", "0xv5e-4"])
def test_bad_name_is_one_line_listing_valid_forms(bad):
  with pytest.raises(ValueError) as e:
    topology.parse(bad)
  msg = str(e.value)
  assert "\n" not in msg and repr(bad) in msg
  assert "v5e-N" in msg and "v4-N" in msg and "v5e:2x2" in msg


def test_chip_table():
  assert topology.chip("v5e-256") is topology.CHIPS["v5e"]
  assert topology.chip("v5litepod") is topology.CHIPS["v5e"]
  assert topology.chip("v4").hbm_bytes == 32 * 2**30
  for c in topology.CHIPS.values():
    # Arithmetic intensity of the ridge point: a few hundred FLOP per byte.
    assert 100 < c.peak_bf16_flops / c.hbm_bytes_per_s < 1000
  with pytest.raises(ValueError, match="Unknown TPU topology"):
    topology.chip("h100")
  # Device kinds as jax spells them; every chip has at least one.
  assert topology.chip("TPU v5 lite") is topology.CHIPS["v5e"]
  assert topology.chip("TPU v6e") is topology.CHIPS["v6e"]
  assert all(c.device_kinds for c in topology.CHIPS.values())


def test_chip_table_agrees_with_pallas():
  """VMEM per core and MXU width are what Pallas' own table says (the fused
  kernels' block rule reads them from ``CHIPS``)."""
  from jax.experimental.pallas import tpu as pltpu  # noqa: PLC0415
  for name, c in topology.CHIPS.items():
    info = pltpu.get_tpu_info_for_chip(pltpu.ChipVersion(name), 1)
    assert (c.vmem_bytes, c.mxu_width) == (
        info.vmem_capacity_bytes, info.mxu_column_size), name


def test_abstract_devices_from_libtpu():
  libtpu_required.require_libtpu()
  devices = topology.abstract_devices("v4-32")
  assert len(devices) == 16 and devices[0].platform == "tpu"
  assert "v4" in devices[0].device_kind
  assert len(topology.abstract_devices("v5e:2x2")) == 4
