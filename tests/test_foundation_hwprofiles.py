"""Simulated hardware specs for `--gpus`: profile names, size lists, cpu, and clear errors."""

from __future__ import annotations

import pytest

from tui.core.gpu.profiles import PROFILES, parse_gpus_spec


def test_required_profiles_exist() -> None:
    for key in ("rtx3060-laptop-6g", "rtx3090-24g", "rtx4090-24g", "2xv100-16g", "h200-141g"):
        assert parse_gpus_spec(key) is PROFILES[key]
    assert len(PROFILES["2xv100-16g"].devices) == 2


def test_size_lists() -> None:
    prof = parse_gpus_spec("2x16GiB,6GiB,512MiB")
    assert prof is not None
    assert [d.total_mib for d in prof.devices] == [16384, 16384, 6144, 512]
    assert [d.name for d in prof.devices] == [f"Simulated GPU {i}" for i in range(4)]
    assert parse_gpus_spec("cpu") is None


@pytest.mark.parametrize("bad", ["16", "x16GiB", "0x8GiB", "8 parsecs", ""])
def test_bad_specs_name_the_part(bad: str) -> None:
    with pytest.raises(ValueError, match="--gpus"):
        parse_gpus_spec(bad)
