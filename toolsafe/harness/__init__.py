"""One process harness: workers, beat and the example downstream as real subprocesses."""
