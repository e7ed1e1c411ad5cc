"""The demo's nights (``demo.data.write_nights``), written once per test process: the DAG
tests and the demo's data tests each take a copy of their own (``demo_nights``), instead of
writing the same nights again for every module."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def demo_nights_written(tmp_path_factory) -> Path:
    """One folder of the demo's nights (read only: copy it with ``demo_nights``)."""
    from demo import data as demo_data

    root = tmp_path_factory.mktemp("demo-nights")
    demo_data.write_nights(root)
    return root


@pytest.fixture(scope="session")
def demo_nights(demo_nights_written):
    """``copy(dest)``: the demo's nights under ``dest`` (a new folder), as
    ``demo.data.write_nights(dest)`` writes them; returns each night's folder, in order."""
    from demo import data as demo_data

    def copy(dest: Path) -> list[Path]:
        shutil.copytree(demo_nights_written, dest, dirs_exist_ok=True)
        return [Path(dest) / night for night in demo_data.NIGHTS]

    return copy
