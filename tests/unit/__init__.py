"""Tests of the code itself, called directly: no command line, no GPU."""
