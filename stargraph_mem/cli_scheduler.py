"""CLI commands for the cadence scheduler (``run``, ``status``); registered on ``cli.app``."""

from __future__ import annotations
