"""The web console: HTML pages that hold no data, and the script that fills them from /v1."""
