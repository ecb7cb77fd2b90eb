"""Profiles: save TOML, write a --models-preset INI section, load, import a command line; controller and dialog."""
