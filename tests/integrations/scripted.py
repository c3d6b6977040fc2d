"""The scripted models of each SDK's own kind: they answer from a script and record what
they were given, so a test can assert what the model received. No network, no API key."""
