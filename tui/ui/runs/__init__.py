"""Stored probe runs: history, compare two, export; their controller, views and screen."""
