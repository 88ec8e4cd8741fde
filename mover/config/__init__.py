"""Configuration: server.properties keys (broker.py), listener security keys (security.py), the dynamic layers over
them (dynamic.py) and the live reload of the file (reloader.py)."""
