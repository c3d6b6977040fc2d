"""Bad secret keys are refused without echoing them."""

from __future__ import annotations

import pytest

from toolsafe.recovery.secrets import new_key
from toolsafe.settings import Settings, SettingsError


def test_bad_keys_are_refused_without_echoing_them() -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"TOOLSAFE_SECRET_KEYS": f"{new_key()},not-a-key-but-secret"})
    assert "key 2" in str(caught.value) and "not-a-key" not in str(caught.value)
