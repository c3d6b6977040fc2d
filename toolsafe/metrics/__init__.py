"""The metrics exporter: the article's counts for Prometheus."""
