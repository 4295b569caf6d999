"""Reviewing the feedback DB: the web UI at /review, its JSON API, human labels and export."""
