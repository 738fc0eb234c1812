"""Rule-pack authoring commands (``test``, ``lint``, ``replay``), registered on ``cli.app``."""

from __future__ import annotations
