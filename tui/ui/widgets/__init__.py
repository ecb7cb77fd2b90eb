"""Widgets, one per module; each owns the messages it sends."""
