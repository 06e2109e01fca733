"""Tests of the `bcgprof` command line, through Typer's test runner or a fresh interpreter."""
