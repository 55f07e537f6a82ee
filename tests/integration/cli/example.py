"""The shipped example pipeline, with names unique to one test."""

from __future__ import annotations

import re
from pathlib import Path

from dedup.cli.config_file import example_path


def example_config(app_id: str, tmp_path: Path) -> Path:
    """Write the example pipeline with ``app_id`` and its own topic; return its path."""
    text = example_path().read_text()
    text = re.sub(r'^app_id = "[^"]*"', f'app_id = "{app_id}"', text, flags=re.MULTILINE)
    text = re.sub(r'^topic = "[^"]*"', f'topic = "{app_id}-out"', text, flags=re.MULTILINE)
    assert app_id in text and f"{app_id}-out" in text
    config = tmp_path / "pipeline.toml"
    config.write_text(text)
    return config
