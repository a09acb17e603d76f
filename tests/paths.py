"""Paths the tests read: the repository, the demo data, the small fixtures and the shared benchmark samples."""
from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "data" / "demo" / "demo.jsonl"
DEMO_DIR = REPO / "data" / "demo"
FIXTURES = REPO / "tests" / "fixtures"
BENCHMARKS = REPO.parent / "shared" / "benchmarks"
SHOTS = Path(os.environ.get("EVORAG_SHOTS", REPO / "artifacts" / "screenshots"))  # browser tests' screenshots
