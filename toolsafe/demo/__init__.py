"""The embedded demo: the article's failure cases on real workers, on SQLite by default."""
