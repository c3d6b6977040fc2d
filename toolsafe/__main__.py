"""``python -m toolsafe`` is the ``toolsafe`` command."""

from toolsafe.cli.main import main

raise SystemExit(main())
