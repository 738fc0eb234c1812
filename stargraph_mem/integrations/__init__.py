"""Integrations with other frameworks; each module needs its optional extra."""
