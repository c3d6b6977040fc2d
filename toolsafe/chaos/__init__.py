"""The chaos run: real workers, SIGKILLs, broker and database faults, and the invariant check."""
