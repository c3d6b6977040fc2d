"""Where the harness draws its free ports from (no socket opened here)."""

from __future__ import annotations

from pathlib import Path

from toolsafe.harness.ports import draw_range, ephemeral_low


def test_the_ports_drawn_lie_just_below_the_ephemeral_range() -> None:
    assert draw_range(32768) == range(12768, 32768)
    assert draw_range(10000) == range(1024, 10000)


def test_no_ports_are_drawn_when_the_range_leaves_too_few_below_it() -> None:
    assert not draw_range(1500)
    assert not draw_range(1024)


def test_the_ephemeral_range_is_read_from_the_kernel_setting(tmp_path: Path) -> None:
    setting = tmp_path / "ip_local_port_range"
    setting.write_text("40000\t60999\n", encoding="ascii")
    assert ephemeral_low(setting) == 40000


def test_an_unreadable_setting_means_linux_s_default(tmp_path: Path) -> None:
    assert ephemeral_low(tmp_path / "missing") == 32768
    garbled = tmp_path / "garbled"
    garbled.write_text("", encoding="ascii")
    assert ephemeral_low(garbled) == 32768
