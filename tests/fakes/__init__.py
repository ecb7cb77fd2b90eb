"""Fakes of third-party modules that behave like the real ones (not mocks of mtp-tune code)."""
