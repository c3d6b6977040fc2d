"""``python -m toolsafe`` is the ``toolsafe`` command."""

from toolsafe.cli.main import main

# Guarded: a process forked for this one by multiprocessing (the test harness's
# preloaded children) imports it as ``__mp_main__`` and must not run the command again.
if __name__ == "__main__":
    raise SystemExit(main())
