"""Thin adapters from core objects to the UI's view models (no Textual, no domain logic)."""
