"""codeact.settings: the environment switches the library reads while it runs."""

from __future__ import annotations

import pytest

from codeact import config, settings
from codeact.errors import ConfigError


def test_each_variable_is_documented_and_read_when_needed(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    names = [getattr(settings, n) for n in settings.__all__ if n.endswith("_ENV")]
    assert names and all(f"``{name}``" in (settings.__doc__ or "") for name in names)
    monkeypatch.setenv(settings.OUTPUT_DIR_ENV, f" {tmp_path}/out ")
    monkeypatch.setenv(settings.SNAPSHOT_DIR_ENV, str(tmp_path / "snaps"))
    assert settings.output_root() == tmp_path / "out" and settings.output_root("given").name == "given"
    assert settings.snapshot_dir() == tmp_path / "snaps"
    monkeypatch.setenv(settings.IMAGES_ENV, "off")
    assert settings.images_enabled() is False and settings.images_enabled(True) is True
    monkeypatch.setenv(settings.IMAGES_ENV, "maybe")
    with pytest.raises(ConfigError, match="CODEACT_IMAGES"):
        settings.images_enabled()


def test_the_cli_configuration_reexports_the_settings() -> None:
    for name in ("images_enabled", "output_root", "snapshot_dir", "env", "IMAGES_ENV", "OUTPUT_DIR_ENV"):
        assert getattr(config, name) is getattr(settings, name), name
