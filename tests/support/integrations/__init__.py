"""The agent SDKs' side of tests/processes/integrations: scripted models of each SDK's
own kind and the helpers that build its objects. The test modules name these kits
lazily (tests/support/lazy.py), so only the worker that runs them imports an SDK."""
