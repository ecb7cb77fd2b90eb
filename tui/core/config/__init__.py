"""Where mtp-tune keeps its files and how it is configured.

paths   the cache, config and data directories (XDG, overridable by environment)
"""
