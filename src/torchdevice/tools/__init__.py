"""The user-facing tools: the command line, the launcher, the pytest plugin, compare."""
