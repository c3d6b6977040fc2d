"""The operator command line: ``toolsafe ...``."""
