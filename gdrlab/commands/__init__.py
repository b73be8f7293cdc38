"""Subcommands of the ``gdrlab`` command line (see gdrlab.cli)."""
