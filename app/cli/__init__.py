"""Command-line interface: the `fraudstream` command."""
