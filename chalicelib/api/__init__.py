"""The HTTP API: one router per resource (chalicelib/api/routers.py lists them), mounted under /v1 by
app.py through chalicelib/api/mount.py. Importing this package imports none of them."""
